#!/usr/bin/env bash
# Writes the random-weight Mamba-1, Mamba-2, RWKV-6, RWKV-7 and hybrid models the model tests run on (a ctest fixture).
#   make_models.sh RECUR_BIN OUT_DIR
# The file name says the weight type, which sets the tolerance against the reference.
set -euo pipefail
recur=$1
out=$2
# every model gets its vocabulary from the test data, named here (recur carries no default)
vocab=$(cd "$(dirname "$0")" && pwd)/../data/ggml-vocab-gpt-2.gguf
mkdir -p "$out"
mk() {
    local name=$1
    shift
    "$recur" mkmodel "$out/$name.gguf" --arch mamba --vocab-file "$vocab" "$@"
}
mk2() {
    local name=$1
    shift
    "$recur" mkmodel "$out/$name.gguf" --arch mamba2 --vocab-file "$vocab" "$@"
}
mk f32-untied --embd 64 --layers 2 --vocab 512 --state 8 --seed 1 --type f32
mk f32-tied --embd 48 --layers 3 --vocab 300 --state 4 --seed 2 --type f32 --tied --inner 80 --conv 3
mk f32-rms --embd 32 --layers 2 --vocab 256 --state 16 --seed 3 --type f32 --dt-b-c-rms
mk f16-untied --embd 64 --layers 2 --vocab 512 --state 8 --seed 4 --type f16
mk bf16-tied --embd 64 --layers 2 --vocab 400 --state 8 --seed 5 --type bf16 --tied --dt-rank 8
# fill-in-the-middle ids (test_fim, test_serve_infill): three ordinary tokens named by --fim
mk f32-fim --embd 32 --layers 2 --vocab 300 --state 4 --seed 40 --type f32 --fim 297,298,299
# Mamba-2: heads sharing groups of B and C; a tied f16 one with a 3-wide conv
mk2 f32-mamba2 --embd 64 --layers 2 --vocab 512 --state 8 --seed 6 --type f32 --heads 4 --groups 2
mk2 f16-mamba2-tied --embd 32 --layers 3 --vocab 300 --state 16 --seed 7 --type f16 --tied \
    --heads 2 --conv 3
# RWKV-6: several heads, small LoRAs; an f16 one that halves the residual every 2 layers
mkr() {
    local name=$1
    shift
    "$recur" mkmodel "$out/$name.gguf" --vocab-file "$vocab" "$@"
}
mkr f32-rwkv6 --arch rwkv6 --embd 64 --layers 3 --vocab 400 --seed 8 --type f32 --head-size 16 \
    --mix-dim 8 --decay-dim 16
mkr f16-rwkv6-rescale --arch rwkv6 --embd 32 --layers 4 --vocab 300 --seed 9 --type f16 \
    --head-size 8 --ff 96 --mix-dim 4 --decay-dim 8 --rescale 2
# RWKV-7: three layers, so the value residual mixes in two
mkr f32-rwkv7 --arch rwkv7 --embd 64 --layers 3 --vocab 400 --seed 10 --type f32 --head-size 16 \
    --lora-w 8 --lora-a 8 --lora-v 4 --lora-g 16
mkr bf16-rwkv7 --arch rwkv7 --embd 32 --layers 2 --vocab 300 --seed 11 --type bf16 --head-size 8 \
    --ff 64 --lora-w 4 --lora-a 4 --lora-v 4 --lora-g 8
# hybrids (docs/hybrid.md): Granite 4.0-H (Mamba-2 and attention layers, every scale), an f16
# Nemotron-H (Mamba-2, attention and ReLU^2 MLP layers by --pattern), Falcon-H1 (attention with
# NeoX RoPE beside Mamba-2 in each layer, the grouped norm)
mkr f32-granite --arch granitehybrid --embd 64 --layers 4 --vocab 512 --state 16 --seed 16 \
    --type f32 --heads 4 --groups 2 --attn-layers 1,2 --embd-scale 2 --residual-scale 0.5 \
    --logit-scale 3
mkr f16-nemotron --arch nemotron_h --embd 64 --layers 5 --vocab 400 --state 8 --seed 17 \
    --type f16 --pattern 'M*-M*' --attn-heads 4 --attn-kv-heads 1 --attn-head-dim 32
mkr f32-falcon --arch falcon-h1 --embd 64 --layers 3 --vocab 512 --state 16 --seed 18 \
    --type f32 --ssm-norm --heads 4 --attn-heads 4 --attn-kv-heads 2 --rope-base 10000
# Q/K RMS norms (attn_q_norm, attn_k_norm; llama.cpp's Qwen3 and OLMo2 forms) in the attention
# layers: each head on its own on Granite (no RoPE) and on Falcon-H1, whose RoPE comes after the
# norm (their weights differ between a rotated pair, so the order shows), and the whole vector
# on Nemotron-H
mkr f32-granite-qk --arch granitehybrid --embd 64 --layers 4 --vocab 512 --state 16 --seed 20 \
    --type f32 --heads 4 --groups 2 --attn-layers 1,2 --embd-scale 2 --residual-scale 0.5 \
    --logit-scale 3 --qk-norm head
mkr f32-falcon-qk --arch falcon-h1 --embd 64 --layers 3 --vocab 512 --state 16 --seed 21 \
    --type f32 --ssm-norm --heads 4 --attn-heads 4 --attn-kv-heads 2 --rope-base 10000 \
    --qk-norm head
mkr f32-nemotron-qk --arch nemotron_h --embd 64 --layers 5 --vocab 400 --state 8 --seed 22 \
    --type f32 --pattern 'M*-M*' --attn-heads 4 --attn-kv-heads 1 --attn-head-dim 32 \
    --qk-norm vector
# quantized by recur quantize (ggml's q8_0 / q4_0 blocks; the reference dequantizes them itself);
# the shapes are whole 32-value blocks, so that every matrix is converted
quantize() {
    "$recur" quantize "$out/$1.gguf" "$out/$2.gguf" "$3" 2>"$out/$2.log"
    grep -q ": [1-9][0-9]* of [0-9]* tensors in $3" "$out/$2.log" || {
        echo "make_models: quantize $1 -> $2: nothing was converted" >&2
        return 1
    }
}
quantize f32-untied q8_0-untied q8_0
quantize f32-rms q4_0-rms q4_0
quantize f32-mamba2 q8_0-mamba2 q8_0
quantize f32-rwkv6 q8_0-rwkv6 q8_0
quantize f32-rwkv7 q8_0-rwkv7 q8_0
quantize f32-granite q8_0-granite q8_0
# llama-quantize's mixes (upper-case names), in quant/ (test_model_ref_quant_*): on the models
# above, whose rows are mostly not whole 256-blocks, most matrices take the fallbacks (q5_0,
# q5_1, q8_0); on the "wide" ones (widths of 256) the K-quants themselves, with q6_K outputs
# and the fallbacks of narrow rows (Mamba's ssm_dt; RWKV's LoRAs stay as they are)
mk f32-wide --embd 256 --layers 2 --vocab 512 --state 16 --seed 12 --type f32
mk2 f16-mamba2-wide --embd 256 --layers 2 --vocab 512 --state 16 --seed 13 --type f16 --heads 8
mkr f32-rwkv6-wide --arch rwkv6 --embd 256 --layers 2 --vocab 400 --seed 14 --type f32 \
    --head-size 64 --ff 768
mkr bf16-rwkv7-wide --arch rwkv7 --embd 256 --layers 2 --vocab 400 --seed 15 --type bf16 \
    --head-size 64 --ff 512
mkr f32-falcon-wide --arch falcon-h1 --embd 256 --layers 2 --vocab 400 --state 16 --seed 19 \
    --type f32 --heads 4 --attn-heads 4 --attn-kv-heads 2 --ff 512 --rope-base 10000
mkdir -p "$out/quant"
for m in f32-untied f32-mamba2 f32-rwkv6 f32-rwkv7 f32-wide f16-mamba2-wide f32-rwkv6-wide \
    bf16-rwkv7-wide f32-falcon-wide; do
    for t in Q4_K_M Q6_K; do quantize "$m" "quant/$t-${m#*-}" "$t"; done
done
for m in f32-wide f16-mamba2-wide f32-rwkv6-wide bf16-rwkv7-wide; do
    quantize "$m" "quant/Q5_K_M-${m#*-}" Q5_K_M
done
quantize f32-wide quant/Q4_1-wide Q4_1
quantize f32-wide quant/Q5_0-wide Q5_0
# a hybrid's attention and feed-forward layers in the other types recur quantizes to
for t in Q5_K_M Q4_1 Q5_1; do quantize f32-falcon-wide "quant/$t-falcon-wide" "$t"; done
echo "make_models: $(ls "$out"/*.gguf "$out"/quant/*.gguf | wc -l) models in $out"
