/*
 * model: architectures (mamba.c, mamba2.c, rwkv6.c, rwkv7.c, each an entry of model.c's table,
 * with what a family shares in mamba.c and rwkv.c), loaded from GGUF, and their forward pass
 * over one placed ubatch.
 *
 * A loaded model keeps the GGUF file open (mapped) and reads its large weight matrices in
 * place; small tensors (norms, biases, A, D, conv weights) are converted to f32 copies at load
 * time. The forward pass gets each layer's recurrent states from the memory and hands them back
 * (rmem_layer_begin / rmem_layer_end), and computes in its own workspace.
 */
#ifndef RECUR_MODEL_H
#define RECUR_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "../batch/batch.h"
#include "../gguf/gguf.h"
#include "../memory/memory.h"
#include "../ops/ops.h"

enum rmodel_arch {
    RMODEL_ARCH_MAMBA = 0,
    RMODEL_ARCH_MAMBA2 = 1,
    RMODEL_ARCH_RWKV6 = 2,
    RMODEL_ARCH_RWKV7 = 3,
    RMODEL_ARCH_GRANITEHYBRID = 4,
    RMODEL_ARCH_NEMOTRON_H = 5,
    RMODEL_ARCH_FALCON_H1 = 6,
};

struct rmodel;
struct rmodel_ws;

/* Loads a model file. NULL with the last error set: the file is not GGUF, its architecture is
 * not supported ("model.gguf: architecture gpt2 is not supported (supported: mamba, ...)"), a key
 * or tensor is missing or has the wrong shape or type (the message names it).
 * repack: give each weight matrix a product reads the layout the kernels of the contexts'
 * instruction set (rops_isa_from_env) read fastest for one input, where it has one
 * (rops_rows16_bytes: q4_K and q6_K with AVX-512), a copy owned by the model beside the
 * file's. */
struct rmodel *rmodel_load(const char *path, bool use_mmap, bool repack);
/* Bytes of the copies repack made (0 for none). */
uint64_t rmodel_repack_bytes(const struct rmodel *model);
void rmodel_free(struct rmodel *model); /* NULL is fine */

enum rmodel_arch rmodel_arch(const struct rmodel *model);
const char *rmodel_arch_name(const struct rmodel *model);
int32_t rmodel_n_vocab(const struct rmodel *model);
int32_t rmodel_n_embd(const struct rmodel *model);
int32_t rmodel_n_layer(const struct rmodel *model);
int32_t rmodel_token_bos(const struct rmodel *model); /* -1 when the file names none */
int32_t rmodel_token_eos(const struct rmodel *model);
const struct rgguf *rmodel_gguf(const struct rmodel *model);
/* A 64-bit identity of this model (hyper-parameters and a sample of every tensor's bytes):
 * state files record it, so that a state made by another model is refused. */
uint64_t rmodel_fingerprint(const struct rmodel *model);

/* Elements of the K and V state rows of each layer (arrays of n_layer; 0 in a hybrid model's
 * layers without a recurrent mixer). */
void rmodel_state_rows(const struct rmodel *model, uint32_t *k_row, uint32_t *v_row);
/* Values of a token's K and V attention rows in each layer (arrays of n_layer; 0 in a layer
 * without attention). Returns whether any layer has attention: a hybrid model, whose memory
 * needs an attention part (rmem_params.attn). */
bool rmodel_attn_rows(const struct rmodel *model, uint32_t *k_row, uint32_t *v_row);
/* Whether any layer has attention (rmodel_attn_rows' answer, without the arrays). */
bool rmodel_is_hybrid(const struct rmodel *model);
/* The attention's head size (0: no attention): a q8_0 cache needs it a multiple of 32. */
uint32_t rmodel_attn_head_dim(const struct rmodel *model);
/* Whether the attention rotates K by position (RoPE): its rows' positions cannot be shifted. */
bool rmodel_attn_rope(const struct rmodel *model);
/* A memory's rotate function (memory.h, rmem_kv_rotate_fn) for this model, user the model:
 * rotates n K rows of attention layer il, each a row of n_head_kv heads in type (f32, f16 or
 * q8_0), by delta[i] positions with the model's RoPE; a row's f16 or q8_0 encoding is decoded,
 * rotated and encoded again, as llama.cpp's K-shift does. */
void rmodel_attn_rotate(void *user, uint32_t il, uint32_t type, void *rows, uint32_t n,
                        const int32_t *delta);

/* A workspace for ubatches of up to n_ubatch tokens of up to n_seq_max sequences (the
 * gathered states take n_seq_max rows, the activations n_ubatch). NULL with the error set when
 * memory cannot be had. */
struct rmodel_ws *rmodel_ws_create(const struct rmodel *model, uint32_t n_ubatch,
                                   uint32_t n_seq_max);
void rmodel_ws_free(struct rmodel_ws *ws);

/* Where the forward pass puts its outputs. For ubatch token t that asks for output, row =
 * out_row[ub->idx[t]]: logits go to logits + row * n_vocab, and (when embd is not NULL) the
 * final normalised hidden state to embd + row * n_embd. */
struct rmodel_out {
    const int32_t *out_row; /* per batch index */
    float *logits;
    float *embd;
};

/*
 * Runs the model over a ubatch already placed in mem, its kernels as ex says (threads, ISA)
 * (rmem_find_slot / rmem_bctx_apply): reads the states of the block, writes the new ones. Token ids
 * come from ub->token, or, for an embedding batch, rows of embd_in (indexed by batch index, n_embd
 * floats each). Returns false only on a broken invariant (error set; a debug build asserts), or
 * when the memory cannot gather the states (out of memory); shapes were checked at load.
 */
bool rmodel_forward(const struct rmodel *model, const struct rops_exec *ex, struct rmodel_ws *ws,
                    struct rmem *mem, const struct rbatch_ubatch *ub, const float *embd_in,
                    const struct rmodel_out *out);

#endif /* RECUR_MODEL_H */
