/*
 * recur: recurrent language models (Mamba, Mamba-2, RWKV-6, RWKV-7) with many sequences at once.
 *
 * The API follows llama.h: opaque handles, *_default_params() structs, a batch of tokens
 * with positions and sequence ids, a memory of per-sequence recurrent states.
 *
 * Conventions
 *  - Ownership: every object returned by a *_load / *_init / *_batch_init function is owned by
 *    the caller and freed with its *_free. Pointers returned by getters (logits, embeddings,
 *    the memory handle) are owned by the context and stay valid until the next recur_decode or
 *    recur_free on it. Strings a function calls static are never freed.
 *  - Errors: a function that fails returns its failure value (below) and sets a thread-local
 *    message that recur_last_error() returns ("model.gguf: tensor blk.3.ssm_in.weight has
 *    shape {768, 3000}, {768, 3072} was expected"). Read it only after a failure: a success
 *    may leave an earlier message in place.
 *  - Return conventions, seven forms:
 *     1. bool: true on success, false on failure (recur_state_save_file); a question's answer
 *        (recur_memory_seq_rm, recur_model_mapping) is false without an error when the answer
 *        is no, as each says.
 *     2. status int32_t: 0 on success, negative on failure (recur_batch_add: -1); recur_decode
 *        alone also returns 1 (no room: not an error, memory unchanged).
 *     3. pointers: NULL on failure (loads, inits, getters, static strings).
 *     4. counts and sizes: >= 0 on success. size_t byte counts (recur_state_*) are 0 on
 *        failure; int32_t counts are negative on failure (-1, or INT32_MIN where a negative
 *        count means something else). A function whose output does not fit returns the
 *        negated size it needs (recur_tokenize, recur_detokenize, recur_token_to_piece), except
 *        the chat template functions, which return the whole length as snprintf does.
 *        recur_token_to_piece is the one outlier: an invalid token gives 0 with the error
 *        set, as llama.cpp's llama_token_to_piece (0 is also the length of an empty piece, so
 *        a caller that cares checks the token id first).
 *     5. tokens, positions, probabilities: a recur_token / recur_pos / float, -1 for none or
 *        on failure.
 *     6. plain getters of a handle (recur_model_n_vocab, recur_n_batch, ...): the value, 0 on
 *        failure.
 *     7. structs by value: the *_default_params() never fail; recur_batch_init returns a batch
 *        whose pointers are all NULL on failure.
 *  - NULL arguments: a NULL handle (model, context, memory, sampler, batch pointer) or NULL
 *    path where a function needs one is an error, never a crash: the function sets the last
 *    error to "FUNCTION: ARGUMENT is NULL" and returns its failure value (above); a function
 *    that returns nothing does nothing. The free functions (recur_model_free, recur_free,
 *    recur_sampler_free, recur_batch_free of a failed init) take NULL and do nothing, as
 *    free() does. Other pointer arguments (texts, buffers, outputs) may be NULL only where the
 *    function's comment says so; where it says NULL is an error, the message names them.
 *  - Threads: a model may be shared by several contexts and threads (once loaded it is only
 *    read, until recur_model_free); one context, and everything it hands out (its memory,
 *    logits), is used by one thread at a time; a sampler likewise. Functions without a handle
 *    (recur_chat_*, recur_json_schema_to_grammar, recur_version, ...) may be called from any
 *    thread at any time, except recur_log_set (see there).
 */
#ifndef RECUR_H
#define RECUR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define RECUR_API __declspec(dllexport)
#elif defined(__GNUC__) || defined(__clang__)
#define RECUR_API __attribute__((visibility("default")))
#else
#define RECUR_API
#endif

/* The library's version, as the project's (CMakeLists.txt reads it from these lines). */
#define RECUR_VERSION_MAJOR 0
#define RECUR_VERSION_MINOR 1
#define RECUR_VERSION_PATCH 0
/* "MAJOR.MINOR.PATCH" of the library linked at run time (a static string, never NULL), which
 * may differ from the RECUR_VERSION_* of the header a program was compiled with. */
RECUR_API const char *recur_version(void);

typedef int32_t recur_token;
typedef int32_t recur_pos;
typedef int32_t recur_seq_id;

struct recur_model;
struct recur_context;
typedef struct recur_memory *recur_memory_t;

/* Types of the recurrent states (type_k: the small conv / shift state, type_v: the large
 * ssm state): f32, f16 or bf16; f16 and bf16 halve the memory. Types of a hybrid model's
 * attention rows (attn_type_k, attn_type_v): f32, f16 or q8_0 (ggml's blocks of 32 values: a
 * quarter of f32's memory, the head size a multiple of 32). The numbers are ggml's. */
enum recur_type {
    RECUR_TYPE_F32 = 0,
    RECUR_TYPE_F16 = 1,
    RECUR_TYPE_BF16 = 2,
    RECUR_TYPE_Q8_0 = 8,
};

struct recur_model_params {
    bool use_mmap;  /* map the file (default true); false reads it into memory */
    bool use_mlock; /* lock the weights in memory (default false); when the system refuses
                       (RLIMIT_MEMLOCK) the model still loads, with a warning */
    /* Write the matrices that a faster one-input kernel reads in another layout a second time
     * at load, in that layout (default true, as llama.cpp's repacking): with AVX-512, q4_K and
     * q6_K matrices with their rows interleaved 16 at a time, which single-sequence generation
     * computes 2.3x (q4_K) and 1.25x (q6_K) as fast as the file's layout. The copies are the
     * model's own memory, as much again as those matrices, beside the file's pages (which prompts
     * still read); use_mlock does not lock them. The logits are the same bits either way. */
    bool repack;
    /* Load only the vocabulary and the metadata (default false): any GGUF file with a
     * tokenizer, a vocabulary-only file such as llama.cpp's ggml-vocab-*.gguf included, whatever
     * its architecture. Such a model tokenizes, detokenizes, samples from caller logits and
     * formats chats; it has no weights (recur_model_size and recur_model_n_params are 0,
     * recur_model_n_embd and recur_model_n_layer are 0, recur_model_n_vocab is the
     * vocabulary's size; recur_model_mapping is false), and recur_init_from_model refuses it. */
    bool vocab_only;
};

/* How recur_decode pools a sequence's hidden states into one embedding (llama.cpp's
 * llama_pooling_type, same numbers; rank is not supported).
 *  - NONE: no pooling; the per-token states of the tokens that ask for output
 *    (recur_get_embeddings_ith), with their logits.
 *  - MEAN: the mean of the states of every token of the sequence in the batch.
 *  - CLS: the state of the sequence's first token (an encoder's [CLS] slot; in a causal,
 *    recurrent model that state has read one token only, so it is rarely what one wants).
 *  - LAST: the state of the sequence's last token. The natural pooling of a recurrent model:
 *    its last hidden state has read the whole text, as its state carries it all.
 * A pooled context makes every token the pooling needs an output itself (all of them for MEAN,
 * the first or last of each sequence for CLS and LAST), whatever batch.logits says, and
 * computes no logits (recur_get_logits* return NULL with the error set); a token on several
 * sequences (n_seq_id > 1) counts in each, and recur_state_get_data then saves no outputs.
 * A sequence split over several decodes: pooling covers the tokens of the last batch only, as
 * llama.cpp's. LAST is still right across decodes (the state carried the earlier tokens into
 * the last one); MEAN and CLS are not, so recur_decode refuses (-1, memory unchanged) a MEAN or
 * CLS batch with a sequence that already holds tokens: put each text whole in one batch (n_batch
 * tokens at most), after clearing its sequence (recur_memory_seq_rm(mem, seq, -1, -1)). */
enum recur_pooling_type {
    RECUR_POOLING_TYPE_NONE = 0,
    RECUR_POOLING_TYPE_MEAN = 1,
    RECUR_POOLING_TYPE_CLS = 2,
    RECUR_POOLING_TYPE_LAST = 3,
};

struct recur_context_params {
    uint32_t n_batch;        /* most tokens one recur_decode call accepts (default 2048) */
    uint32_t n_ubatch;       /* most tokens computed at once (default 512) */
    uint32_t n_seq_max;      /* sequence ids 0 .. n_seq_max-1, one state cell each (default 1) */
    int32_t n_threads;       /* threads for decode calls of one token (default 4; 1..256) */
    int32_t n_threads_batch; /* threads for decode calls of more tokens (default 4; 1..256) */
    enum recur_type type_k;  /* default f32 */
    enum recur_type type_v;  /* default f32 */
    /* Embeddings: keep the final hidden state after the output norm (before the output
     * projection), as llama.cpp's embeddings are (default false). With pooling_type none
     * (default) each output token's state is kept (recur_get_embeddings_ith) beside its logits;
     * with mean, cls or last one pooled vector per sequence is kept (recur_get_embeddings_seq)
     * and no logits are computed (see enum recur_pooling_type). pooling_type other than none
     * needs embeddings = true. */
    bool embeddings;
    enum recur_pooling_type pooling_type;
    /* Rollback (see recur_memory_seq_rm): per sequence, keep its state after each of its last
     * n_rollback positions (default 0), and after every position p with
     * (p + 1) % checkpoint_every == 0 (default 0: none), within snapshot_bytes for all
     * sequences together (default 256 MiB; the oldest snapshots go first). One snapshot costs
     * the f32 size of one sequence's state (recur_state_seq_get_size gives its order). */
    uint32_t n_rollback;
    uint32_t checkpoint_every;
    uint64_t snapshot_bytes;
    /* The prefix state cache's budget, states and tokens together (default 0: no cache). */
    uint64_t prefix_cache_bytes;
    /* A hybrid model's attention cache (Granite 4.0-H, Nemotron-H, Falcon-H1): the K and V
     * rows of every token its sequences hold, room for n_ctx tokens over all sequences
     * (default 4096; 1 .. 2^24), however they are spread among them (it is kept in pages of
     * 32 tokens, with a spare page per sequence; the rows of a prefix shared by forked
     * sequences count once). A decode that needs more rows returns 1 (no room) and changes
     * nothing: remove or shorten sequences to go on. attn_type_k / attn_type_v: the rows'
     * type, f32 (default), f16 or q8_0. Unlike llama.cpp's f16 default: a hybrid's rows are a
     * few KiB a token (Granite 4.0-H-350M: 8 KiB in f32), and in f32 a sequence's logits do
     * not depend on the other sequences and chunks of its batch (to float rounding, 1e-5),
     * where rounding the rows to f16 or q8_0 turns such last-bit differences into steps of
     * 1e-4 .. 5e-3 now and then (bench/RESULTS.md). A recurrent model has no attention rows:
     * these then change nothing. */
    uint32_t n_ctx;
    enum recur_type attn_type_k;
    enum recur_type attn_type_v;
};

/* The defaults written beside each field above; never fail, allocate nothing. */
RECUR_API struct recur_model_params recur_model_default_params(void);
/* The defaults written beside each field above; never fail, allocate nothing. */
RECUR_API struct recur_context_params recur_context_default_params(void);

/* ---- models and contexts ----------------------------------------------------------------- */

/* Loads a GGUF model file as llama.cpp's converter writes it: general.architecture "mamba",
 * "mamba2", "rwkv6", "rwkv7", or the hybrids "granitehybrid", "nemotron_h" and "falcon-h1"
 * (docs/ has each layout; docs/hybrid.md what of the hybrids is refused), with a "gpt2" (byte-level
 * BPE, with the pre-tokenizer tokenizer.ggml.pre names), "llama" (SentencePiece) or "rwkv"
 * tokenizer. NULL on failure, the message naming the file and the key or tensor at fault. */
RECUR_API struct recur_model *recur_model_load_from_file(const char *path,
                                                         struct recur_model_params params);
/* Frees the model; every context made from it must be freed first. NULL is fine. */
RECUR_API void recur_model_free(struct recur_model *model);
/* Whether the model's file is mapped (use_mmap), and where: *addr and *size the mapping.
 * A mapped file must not be written in place while the model lives: its pages are read when
 * used, so the weights would change under it, and a file cut shorter makes reading them raise
 * SIGBUS. A program may catch SIGBUS and test its si_addr against this range to say so;
 * replacing the file by rename is harmless. False (*addr NULL, *size 0) when the model was
 * read into memory. */
RECUR_API bool recur_model_mapping(const struct recur_model *model, const void **addr,
                                   size_t *size);

/* ---- quantizing --------------------------------------------------------------------------- */

/* The weight types recur_model_quantize writes, numbered as llama.cpp's LLAMA_FTYPE_MOSTLY_*
 * (the file's general.file_type). The _K_S / _K_M / Q6_K mixes take llama-quantize's rules for
 * which tensor gets which type (recur_model_quantize); the others are one type throughout. */
enum recur_ftype {
    RECUR_FTYPE_MOSTLY_F16 = 1,
    RECUR_FTYPE_MOSTLY_Q4_0 = 2,
    RECUR_FTYPE_MOSTLY_Q4_1 = 3,
    RECUR_FTYPE_MOSTLY_Q8_0 = 7,
    RECUR_FTYPE_MOSTLY_Q5_0 = 8,
    RECUR_FTYPE_MOSTLY_Q5_1 = 9,
    RECUR_FTYPE_MOSTLY_Q4_K_S = 14,
    RECUR_FTYPE_MOSTLY_Q4_K_M = 15,
    RECUR_FTYPE_MOSTLY_Q5_K_S = 16,
    RECUR_FTYPE_MOSTLY_Q5_K_M = 17,
    RECUR_FTYPE_MOSTLY_Q6_K = 18,
    RECUR_FTYPE_MOSTLY_BF16 = 32,
};

struct recur_model_quantize_params {
    enum recur_ftype ftype; /* default RECUR_FTYPE_MOSTLY_Q8_0 */
    /* true: every converted matrix in the ftype's base type (llama-quantize --pure), but for
     * the fallbacks of rows that are not whole blocks; false (default): llama-quantize's mix */
    bool pure;
    /* threads converting the rows of a tensor (default 4; 1..256) */
    int32_t nthread;
};

/* What one recur_model_quantize call did. */
struct recur_model_quantize_stats {
    int32_t n_tensors;   /* in the file */
    int32_t n_converted; /* rewritten in the new type */
    uint64_t bytes_in;   /* tensor bytes read */
    uint64_t bytes_out;  /* tensor bytes written */
};

/* ftype q8_0; never fails. */
RECUR_API struct recur_model_quantize_params recur_model_quantize_default_params(void);
/*
 * Rewrites the weight matrices of the model file in_path in params->ftype, as llama-quantize
 * does, into out_path, a GGUF file llama.cpp reads. Converted: every 2-D tensor whose name ends
 * in "weight", except those llama.cpp's quantizer keeps as they are: norms (also 2-D ones),
 * Mamba's ssm_conv1d and RWKV's small LoRA, decay, bonus and lerp tensors. Each converted
 * matrix gets the ftype's base type (q4_K for Q4_K_S and Q4_K_M, q5_K for the Q5_K mixes, q6_K,
 * or the one type of the others), changed, unless params->pure, by llama-quantize's rules:
 *  - output.weight (or token_embd.weight when the file has no output.weight: the tied output)
 *    in q6_K, or q8_0 when its rows are not whole blocks of the base type; q8_0 stays q8_0;
 *  - attention V / QKV matrices, in Q4_K_M and Q5_K_M q6_K for the first and last eighth of
 *    them and every third between (llama.cpp's use_more_bits), in Q4_K_S q5_K for the first 4;
 *  - ffn_down matrices, the same by layer in Q4_K_M and Q5_K_M, in Q4_K_S q5_K in the first
 *    eighth of the layers.
 * Then, pure or not, a matrix whose rows are not whole blocks of its type falls back as
 * llama-quantize's does (q4_K to q5_0, q5_K to q5_1, q6_K to q8_0; f16 when that still does not
 * fit), and a legacy type that does not fit keeps the tensor's own type. Other tensors and every
 * key are copied; general.file_type is set to ftype and general.quantization_version to 2.
 * Values are rounded as ggml's reference quantizers round them (legacy types) or fitted by
 * least squares (K types; ops_quantize.c), each tensor's rows on params->nthread threads (the
 * same bytes however many). out_path is replaced crash-safely (as the state
 * files). stats, when not NULL, gets the counts on success.
 * Returns true, or false with the error set: a NULL argument, an unknown ftype, nthread out of
 * 1..256, in_path and out_path naming the same file, an input that is not a GGUF file recur
 * reads, out_path that cannot be written, no memory or threads.
 */
RECUR_API bool recur_model_quantize(const char *in_path, const char *out_path,
                                    const struct recur_model_quantize_params *params,
                                    struct recur_model_quantize_stats *stats);

/* ---- contexts ---------------------------------------------------------------------------- */

/* A context: the state memory for n_seq_max sequences, buffers for decoding, and
 * max(n_threads, n_threads_batch) - 1 worker threads (they spin briefly after each kernel,
 * then sleep). Its kernels use the widest instruction set the CPU runs (AVX-512, AVX2 with
 * AVX-VNNI, AVX2 or portable C), or the one the environment variable RECUR_ISA names (avx512,
 * avxvnni, avx2 or scalar). The thread that calls recur_decode does a worker's share too, with
 * up to 64 KiB of its stack for the kernels' tiles (the workers have the system's default).
 * NULL on failure: invalid parameters (the message names the field), memory or threads that
 * cannot be had, a RECUR_ISA that names no instruction set or one this CPU does not run. */
RECUR_API struct recur_context *recur_init_from_model(struct recur_model *model,
                                                      struct recur_context_params params);
RECUR_API void recur_free(struct recur_context *ctx); /* NULL is fine */

/* Tokens in the model's vocabulary (the rows of its logits); 0 with the error set for NULL. */
RECUR_API int32_t recur_model_n_vocab(const struct recur_model *model);
/* Width of the model's hidden state (recur_get_embeddings_ith's floats); 0 for a vocab_only
 * model, 0 with the error set for NULL. */
RECUR_API int32_t recur_model_n_embd(const struct recur_model *model);
/* Layers of the model; 0 for a vocab_only model, 0 with the error set for NULL. */
RECUR_API int32_t recur_model_n_layer(const struct recur_model *model);
/* Whether the model is a hybrid: attention layers beside its recurrent ones (granitehybrid,
 * nemotron_h, falcon-h1). Its sequences then also hold every token's K and V rows (n_ctx);
 * false for a vocab_only model, false with the error set for NULL. */
RECUR_API bool recur_model_is_hybrid(const struct recur_model *model);
/* The model's architecture as its file names it (general.architecture: "mamba", "mamba2",
 * "rwkv6", "rwkv7", "granitehybrid", "nemotron_h", "falcon-h1"); owned by the model, never NULL for
 * a loaded model (NULL with the error set for a NULL model). */
RECUR_API const char *recur_model_arch_name(const struct recur_model *model);
/* The context's parameters as created: n_seq_max, n_batch, n_ubatch; 0 with the error set for
 * a NULL ctx. */
RECUR_API uint32_t recur_n_seq_max(const struct recur_context *ctx);
/* The context's n_batch: the most tokens one recur_decode accepts (0 for a NULL ctx). */
RECUR_API uint32_t recur_n_batch(const struct recur_context *ctx);
/* The context's n_ubatch: the most tokens computed at once (0 for a NULL ctx). */
RECUR_API uint32_t recur_n_ubatch(const struct recur_context *ctx);
/* The model the context was made from (not owned by the context: the caller frees it after
 * the context); NULL with the error set for a NULL ctx. */
RECUR_API const struct recur_model *recur_get_model(const struct recur_context *ctx);
/* Changes the thread counts of later decode calls (clamped to 1..256). The context's threads
 * are made once, at creation, for the larger of the two counts; asking for more makes a new
 * team, and if threads cannot be had the old team stays and calls use at most its size. Not
 * while the context is decoding (one thread per context). */
RECUR_API void recur_set_n_threads(struct recur_context *ctx, int32_t n_threads,
                                   int32_t n_threads_batch);

/* Bytes of the model's weights: every tensor of the file as stored (quantized ones in their
 * blocks). 0 for a vocab_only model. */
RECUR_API uint64_t recur_model_size(const struct recur_model *model);
/* Elements of the model's weights, every tensor counted. 0 for a vocab_only model. */
RECUR_API uint64_t recur_model_n_params(const struct recur_model *model);
/* Bytes of the second copies of matrices that recur_model_params.repack made at load, the
 * model's own memory beside the file's: 0 with repack false, for a vocab_only model, and where
 * no kernel of the contexts' instruction set reads another layout (today: q4_K and q6_K
 * matrices with AVX-512). */
RECUR_API uint64_t recur_model_repack_size(const struct recur_model *model);
/* A 64-bit hash of the model's hyper-parameters, tensor names, types, shapes and the first and
 * last 4 KiB of each tensor's bytes: the one saved states and prefix cache entries carry, so
 * equal for the same weights, and different for other weights. 0 for a vocab_only model. */
RECUR_API uint64_t recur_model_fingerprint(const struct recur_model *model);

/* One tensor of a model file as recur_model_tensor describes it. */
struct recur_tensor_info {
    const char *name; /* "blk.0.ssm_in.weight"; owned by the model */
    int32_t n_dims;   /* 1 .. 4 */
    int64_t ne[4];    /* elements per dimension, ne[0] the fastest; unused ones are 1 */
    const char *type; /* ggml's name: "f32", "f16", "bf16", "q8_0", "q4_K", ... (static) */
    uint64_t nbytes;  /* bytes as stored */
};
/* The model's tensors, in file order (0 for a vocab_only model); recur_model_tensor fills *info
 * with tensor i and returns true, or returns false with the error set when model or info is
 * NULL or i is not in 0 .. recur_model_n_tensors - 1. For programs that weigh a model's parts
 * (recur bench sets speed against the bytes a token reads). recur_model_n_tensors is 0 with the
 * error set for a NULL model. */
RECUR_API int32_t recur_model_n_tensors(const struct recur_model *model);
/* Tensor i of the model, as described above; info's name is owned by the model. */
RECUR_API bool recur_model_tensor(const struct recur_model *model, int32_t i,
                                  struct recur_tensor_info *info);

/* The instruction set the context's kernels use: "avx512", "avxvnni", "avx2" or "scalar" (a
 * static string; RECUR_ISA's names). */
RECUR_API const char *recur_context_isa(const struct recur_context *ctx);
/* Measures the machine as the context's kernels see it, on its n_threads_batch threads and its
 * instruction set: the multiply-add peak in GFLOP/s (independent FMA chains, no memory
 * traffic) and the read bandwidth in GB/s (streaming a 256 MiB buffer, allocated for the call
 * and freed). For benchmarks that set a speed against the bound that limits it. Takes a second
 * or so; the context must not be decoding at the same time. False with the error set when an
 * argument is NULL or the buffer cannot be had. */
RECUR_API bool recur_context_probe(struct recur_context *ctx, double *fma_gflops,
                                   double *read_gbps);

/* This thread's last error message ("" when none). Valid until the thread's next failure. */
RECUR_API const char *recur_last_error(void);

/* ---- logging ----------------------------------------------------------------------------- */

enum recur_log_level {
    RECUR_LOG_LEVEL_DEBUG = 0,
    RECUR_LOG_LEVEL_INFO = 1,
    RECUR_LOG_LEVEL_WARN = 2,
    RECUR_LOG_LEVEL_ERROR = 3,
};
/* Receives one message of the library: text is a NUL-terminated line ending in '\n', valid
 * only during the call (copy it to keep it); user is the pointer given to recur_log_set. */
typedef void (*recur_log_callback)(enum recur_log_level level, const char *text, void *user);
/* Sends the library's messages (the warnings a model's load can give, such as a vocabulary
 * without its pre-tokenizer key, and debug notes) to callback instead of the default logger,
 * which writes warnings and errors to stderr and drops the rest. NULL restores the default (and
 * forgets user). One setting for the whole process, as llama_log_set: set it before loading
 * models or starting threads that use the library, not while they run. Messages are cut at
 * 1,023 bytes. Failures are never reported through the log: they return an error and set
 * recur_last_error. */
RECUR_API void recur_log_set(recur_log_callback callback, void *user);

/* ---- batches ----------------------------------------------------------------------------- */

/* As llama_batch: n_tokens tokens (token) or embedding rows (embd, n_embd floats each), each
 * with a position, n_seq_id[i] sequence ids seq_id[i][..], and logits[i] != 0 when its
 * output is wanted. pos NULL: positions follow what each token's first sequence holds.
 * n_seq_id / seq_id NULL: every token on sequence 0. logits NULL: only the last token. */
struct recur_batch {
    int32_t n_tokens;
    recur_token *token;
    float *embd;
    recur_pos *pos;
    int32_t *n_seq_id;
    recur_seq_id **seq_id;
    int8_t *logits;
    /* Set by recur_batch_init (0 in any other batch): the tokens and the sequence ids per token
     * its arrays hold, which recur_batch_add fills up to. recur_decode does not read them. */
    int32_t n_tokens_max;
    int32_t n_seq_max;
};

/* Allocates a batch for up to n_tokens tokens (embd > 0: embedding rows of embd floats
 * instead of token ids), each with up to n_seq_max sequence ids. n_tokens is set to 0; fill
 * the arrays and set n_tokens, or add tokens with recur_batch_add. Free with recur_batch_free. On
 * allocation failure every pointer is NULL (check batch.pos). */
RECUR_API struct recur_batch recur_batch_init(int32_t n_tokens, int32_t embd, int32_t n_seq_max);
/* A batch over the caller's tokens, all on sequence 0 at the positions that follow what
 * sequence 0 holds, output for the last token only. Nothing is allocated: do not free. */
RECUR_API struct recur_batch recur_batch_get_one(recur_token *tokens, int32_t n_tokens);
/* Frees the arrays of a batch made by recur_batch_init (also one whose init failed: its
 * pointers are NULL). Not for recur_batch_get_one's batches or batches built by hand. */
RECUR_API void recur_batch_free(struct recur_batch batch);
/* Appends one token to a batch made by recur_batch_init with token ids (embd == 0), as
 * llama.cpp's common_batch_add: token at position pos on the n_seq_ids sequences seq_ids[..],
 * with its output (logits) wanted or not; n_tokens grows by one. Returns 0, or -1 with the error
 * set, the batch unchanged, when the batch is full (n_tokens already the n_tokens it was made
 * for), n_seq_ids is not 1 .. its n_seq_max, seq_ids is NULL, batch is NULL, or the batch was not
 * made by recur_batch_init for token ids (recur_batch_get_one, an embedding batch, a batch
 * built by hand). Ids and positions are checked by recur_decode, not here. */
RECUR_API int32_t recur_batch_add(struct recur_batch *batch, recur_token token, recur_pos pos,
                                  const recur_seq_id *seq_ids, int32_t n_seq_ids, bool logits);

/*
 * Decodes a batch: any mix of sequences and tokens, split into ubatches of equal tokens per
 * sequence, each placed in the state memory and run through the model.
 * Returns 0 on success; 1 when the memory has no room for the batch's sequences (memory
 * unchanged); -1 for a NULL ctx or an invalid batch (a token id out of range, a sequence id
 * out of range, positions that do not follow, more than n_batch tokens, an empty batch ...;
 * memory unchanged, recur_last_error names the token); < -1 on another failure.
 *
 * A sequence's logits do not depend on the batch: with a model of block-type weights (q8_0,
 * the K-quants, ...), its tokens give the same bits alone, beside other sequences, as one
 * prompt or in chunks (Mamba-2's prompts of many tokens excepted: its chunked scan sums in
 * another order, within float rounding); with float weights, prompts take faster kernels that
 * agree with one token at a time to float rounding (1e-5 of the logits' rms).
 */
RECUR_API int32_t recur_decode(struct recur_context *ctx, struct recur_batch batch);

/* The logits (n_vocab floats) of batch token i of the last decode; i < 0 counts outputs from
 * the end (-1: the last output). NULL with the error set when token i asked for none. */
RECUR_API float *recur_get_logits_ith(struct recur_context *ctx, int32_t i);
/* All output rows of the last decode, in batch order (n_outputs x n_vocab); NULL when the last
 * decode produced none (or ctx is NULL, with the error set). */
RECUR_API float *recur_get_logits(struct recur_context *ctx);
/* The final normalised hidden state (n_embd floats) of batch token i of the last decode (i < 0
 * counts outputs from the end), for contexts made with embeddings = true and pooling_type none.
 * Owned by the context, valid until the next recur_decode, recur_state_set_data or recur_free.
 * NULL with the error set: ctx NULL, embeddings off, a pooled context (use
 * recur_get_embeddings_seq), token i out of range or not asking for output. */
RECUR_API float *recur_get_embeddings_ith(struct recur_context *ctx, int32_t i);
/* The pooled embedding (n_embd floats, not normalised) of sequence seq_id over its tokens in
 * the last recur_decode, as the context's pooling_type says (enum recur_pooling_type). Owned by
 * the context, valid until the next recur_decode or recur_free; the caller copies it to keep
 * it. NULL with the error set: ctx NULL, embeddings off, pooling_type none (use
 * recur_get_embeddings_ith), seq_id not in 0 .. n_seq_max-1, or seq_id had no token in the
 * last decode (also: no decode yet, or the last one failed). */
RECUR_API float *recur_get_embeddings_seq(struct recur_context *ctx, recur_seq_id seq_id);
/* The context's pooling_type (RECUR_POOLING_TYPE_NONE for a NULL ctx, with the error set). */
RECUR_API enum recur_pooling_type recur_pooling_type(const struct recur_context *ctx);

/* ---- the state memory -------------------------------------------------------------------- */

/* The context's memory (owned by the context). Semantics are llama.cpp's recurrent memory: a
 * sequence's state can only be removed whole; seq_cp shares the state (copy on write). */
RECUR_API recur_memory_t recur_get_memory(const struct recur_context *ctx);
/* Forgets every sequence (and its snapshots); data: also zero the states. Every recur_memory_*
 * function is used by the context's one thread at a time, and does nothing (false, -1) with
 * the error set when mem is NULL. */
RECUR_API void recur_memory_clear(recur_memory_t mem, bool data);
/* Removes positions [p0, p1) of seq (seq < 0: every sequence; p0 < 0: from 0; p1 < 0: to the
 * end). Returns false, changing nothing, when the range would cut a state in the middle.
 * Rollback: removing a tail (0 < p0 <= pos_max, p1 < 0) succeeds when a snapshot of seq at a
 * position below p0 is kept (n_rollback, checkpoint_every): seq goes back to the newest such
 * snapshot, recur_memory_seq_pos_max says which position it now holds, and the caller decodes
 * the tokens after it again. Without such a snapshot it returns false and changes nothing. A
 * caller that only removes whole sequences sees no difference. */
RECUR_API bool recur_memory_seq_rm(recur_memory_t mem, recur_seq_id seq, recur_pos p0,
                                   recur_pos p1);
/* Makes dst share src's state (whole: p0, p1 are ignored). */
RECUR_API void recur_memory_seq_cp(recur_memory_t mem, recur_seq_id src, recur_seq_id dst,
                                   recur_pos p0, recur_pos p1);
/* Drops every sequence except seq (seq out of range: drops all); seq's state stays whole. */
RECUR_API void recur_memory_seq_keep(recur_memory_t mem, recur_seq_id seq);
/* Moves the position of seq's state by delta when it lies in [p0, p1) (below 0: dropped). A
 * hybrid model's attention rows in [p0, p1) move with it, of every sequence sharing the state;
 * with RoPE (Falcon-H1) their K rows are rotated by the move, as llama.cpp's K-shift does (in
 * f16 or q8_0 rows that rounds them again), and rows a moved sequence shares with one that stays
 * are copied first. When they cannot move (a row would go below 0 or out of order, or the
 * copies need more free attention pages than there are) nothing changes and the last error
 * says why. */
RECUR_API void recur_memory_seq_add(recur_memory_t mem, recur_seq_id seq, recur_pos p0,
                                    recur_pos p1, recur_pos delta);
/* Divides the position of seq's state by d (d <= 1: nothing) when it lies in [p0, p1), as
 * llama.cpp's recurrent memory does; a hybrid model's attention rows in [p0, p1) are divided
 * (and rotated) as recur_memory_seq_add moves them. */
RECUR_API void recur_memory_seq_div(recur_memory_t mem, recur_seq_id seq, recur_pos p0,
                                    recur_pos p1, int d);
/* pos_max: the position seq's state holds, -1 when none. pos_min: the oldest position seq can
 * be rolled back to (its oldest snapshot), pos_max when no snapshot is kept. */
RECUR_API recur_pos recur_memory_seq_pos_min(recur_memory_t mem, recur_seq_id seq);
/* The position seq's state holds, -1 when none (or mem is NULL, with the error set). */
RECUR_API recur_pos recur_memory_seq_pos_max(recur_memory_t mem, recur_seq_id seq);
/* Whether positions can be moved (recur_memory_seq_add / _div): true for a recurrent memory,
 * whose states do not depend on their positions, and for every hybrid model recur loads (with
 * RoPE, the moved K rows are rotated); false with the error set for NULL. */
RECUR_API bool recur_memory_can_shift(recur_memory_t mem);

/* ---- saving and restoring states --------------------------------------------------------- */

/* The whole context (every sequence's state and the last decode's outputs), into a buffer.
 * get_size: the bytes get_data will write. get_data: bytes written, 0 on failure (buffer too
 * small). set_data: bytes read, 0 on failure: a state from another model or a corrupt one is
 * refused with a message, and the memory is then cleared. */
RECUR_API size_t recur_state_get_size(struct recur_context *ctx);
/* Writes the state (get_size bytes) into dst[0 .. size); 0 when it does not fit. */
RECUR_API size_t recur_state_get_data(struct recur_context *ctx, uint8_t *dst, size_t size);
/* Reads a state written by recur_state_get_data from src[0 .. size) (see above). */
RECUR_API size_t recur_state_set_data(struct recur_context *ctx, const uint8_t *src, size_t size);
/* One sequence's state. set_data puts it into sequence dest (its former state is dropped);
 * on failure (0) dest holds nothing and other sequences are untouched. */
RECUR_API size_t recur_state_seq_get_size(struct recur_context *ctx, recur_seq_id seq);
/* Writes seq's state into dst[0 .. size): bytes written, 0 when it does not fit or seq is out
 * of range. */
RECUR_API size_t recur_state_seq_get_data(struct recur_context *ctx, uint8_t *dst, size_t size,
                                          recur_seq_id seq);
/* Reads a state written by recur_state_seq_get_data into dest (see above). */
RECUR_API size_t recur_state_seq_set_data(struct recur_context *ctx, const uint8_t *src,
                                          size_t size, recur_seq_id dest);
/* Files: the state with the token list that produced it. load: the tokens go to tokens_out
 * (at most capacity; a longer list fails), their count to *n_tokens_out.
 * Every file recur writes (state files, prefix cache files, GGUF files) replaces its path
 * crash-safely: a new file in the same folder, fsynced and renamed over the old one, so a
 * failure, a full disk or a kill leaves the old file whole and no temporary file behind. A
 * symbolic link is written through (the link stays, its target gets the new contents), an
 * existing file keeps its permission bits, and a path that is a device, FIFO or folder is
 * refused ("... is a FIFO, not a regular file; refusing to replace it"). Files are read only
 * when they are regular files: a FIFO is refused at once, never waited on. */
RECUR_API bool recur_state_save_file(struct recur_context *ctx, const char *path,
                                     const recur_token *tokens, size_t n_tokens);
/* Loads a file written by recur_state_save_file: the memory as saved (on failure it is
 * cleared), the tokens as described above. */
RECUR_API bool recur_state_load_file(struct recur_context *ctx, const char *path,
                                     recur_token *tokens_out, size_t capacity,
                                     size_t *n_tokens_out);
/* One sequence: returns the bytes written / read, 0 on failure. */
RECUR_API size_t recur_state_seq_save_file(struct recur_context *ctx, const char *path,
                                           recur_seq_id seq, const recur_token *tokens,
                                           size_t n_tokens);
/* Loads a file written by recur_state_seq_save_file into sequence dest (on failure dest holds
 * nothing; other sequences are untouched): the bytes read, 0 on failure. */
RECUR_API size_t recur_state_seq_load_file(struct recur_context *ctx, const char *path,
                                           recur_seq_id dest, recur_token *tokens_out,
                                           size_t capacity, size_t *n_tokens_out);
/* Whether a file can be written at path by the functions above, as far as can be told before
 * writing: the path (or its link's target) is a regular file or absent, and its folder lets
 * this process create a file. Creates nothing. For a program that would otherwise learn only
 * after a long generation that its output cannot be saved. False with the error naming the
 * path, the folder and the reason. */
RECUR_API bool recur_file_check_writable(const char *path);

/* ---- prefix state cache ------------------------------------------------------------------ */

/*
 * A store of (token prefix -> state) shared by all sequences of a context, within
 * prefix_cache_bytes (least recently used entries go first), so that a prompt that begins with
 * text processed before decodes only the rest. Token lists are hashed and compared in full on
 * a hit: a hash collision cannot return a wrong state. Positions are token indices: sequence
 * positions 0 .. n-1 hold tokens[0 .. n).
 *
 * store: keeps what seq holds (tokens[0 .. n_tokens), n_tokens == recur_memory_seq_pos_max + 1)
 * under tokens, and each snapshot seq keeps (n_rollback, checkpoint_every) under the prefix it
 * ends. Where states are stored decides what can be reused: store after the prompt with
 * n_rollback >= 2 (the prompt minus its last token is then kept, so an exact repeat restores
 * it and decodes one token for its logits), again after the generated text (a next turn that
 * extends prompt + completion hits), and with checkpoint_every (a prompt that diverges in the
 * middle still reuses the part before). The state after all the tokens is stored every time;
 * a snapshot's entry that the cache holds already (stored by an earlier call for the same
 * conversation: one model's state of one prefix is always the same) is only marked as used.
 * Returns the entries stored, -1 on error (no cache, bad seq, a token count that does not
 * match the sequence, no memory).
 *
 * restore: puts into seq the state of the longest stored prefix of tokens shorter than
 * n_tokens (at least one token is left to decode, whose logits the caller wants), replacing
 * seq's state and snapshots, and returns its length; 0 when nothing matches (seq untouched),
 * -1 on error.
 */
RECUR_API int32_t recur_prefix_cache_store(struct recur_context *ctx, recur_seq_id seq,
                                           const recur_token *tokens, int32_t n_tokens);
/* restore, as described above. */
RECUR_API int32_t recur_prefix_cache_restore(struct recur_context *ctx, recur_seq_id seq,
                                             const recur_token *tokens, int32_t n_tokens);
/* The same within one tenant (store and restore above are tenant 0): entries stored under a
 * tenant are found only by restores of the same tenant, so that one user's prompts (a server's
 * API key, hashed) never speed up, or show up in, another's. The cache file keeps each
 * entry's tenant. */
RECUR_API int32_t recur_prefix_cache_store_tenant(struct recur_context *ctx, uint64_t tenant,
                                                  recur_seq_id seq, const recur_token *tokens,
                                                  int32_t n_tokens);
/* Flags of recur_prefix_cache_store_flags. */
enum {
    /* only the state after all the tokens, not the snapshots: for a caller that stores the same
       sequence again soon, with its snapshots, and wants this store quick (a server storing the
       prompt minus its last token on the way to the first token, then the whole prompt after
       it) */
    RECUR_PREFIX_STORE_NO_SNAPSHOTS = 1u << 0,
};
/* store within tenant with flags (RECUR_PREFIX_STORE_*; 0: as recur_prefix_cache_store_tenant).
 * -1 with the error set for a bit it does not know, as for the rest. */
RECUR_API int32_t recur_prefix_cache_store_flags(struct recur_context *ctx, uint64_t tenant,
                                                 recur_seq_id seq, const recur_token *tokens,
                                                 int32_t n_tokens, uint32_t flags);
/* restore within tenant, as described above. */
RECUR_API int32_t recur_prefix_cache_restore_tenant(struct recur_context *ctx, uint64_t tenant,
                                                    recur_seq_id seq, const recur_token *tokens,
                                                    int32_t n_tokens);

struct recur_prefix_cache_stats {
    uint64_t bytes;       /* held now */
    uint64_t max_bytes;   /* prefix_cache_bytes */
    uint64_t entry_bytes; /* one stored state, without its tokens */
    /* a hybrid model's entries also hold their attention rows: at most this many bytes a token,
     * and 64 + 24 x n_layer bytes of their headers (0 for a recurrent model) */
    uint64_t attn_bytes_per_token;
    uint32_t n_entries;
    uint64_t hits, misses;
    uint64_t tokens_reused; /* prompt tokens restores saved from decoding */
    uint64_t evictions;
    /* the second tier (recur_prefix_cache_set_store) */
    uint64_t store_hits;    /* restores that took a longer prefix from it */
    uint64_t store_refused; /* entries it gave that were corrupt, foreign or not the prompt's */
    uint64_t store_puts;    /* entries handed to it */
};

/*
 * A second tier for the prefix cache, outside the process: a shared store (Redis) or a folder
 * that outlives it, supplied by the caller, so that a conversation resumes with one restore on
 * another process or machine. The library keeps its in-process cache as the first tier and
 * calls the store:
 *  - put: for every entry stored (recur_prefix_cache_store_tenant: the state after the tokens,
 *    and its checkpoints), with the entry serialized as blob: the model's fingerprint, the
 *    tenant, the tokens, the state and a checksum. The store keeps it under (model, tenant,
 *    tokens[0..n)) as it likes; the call must not block (queue the write) and cannot fail.
 *  - get: on a restore whose first-tier hit is shorter than min_len tokens (or none), the
 *    longest stored prefix of tokens[0..n) of that model and tenant with min_len <= length <=
 *    max_len: its length, and *blob (malloc'd; the library frees it) of *len bytes; 0 for none,
 *    which is also the answer of a store that failed or timed out.
 * A blob is checked before use: one that is corrupt, of another model or tenant, or of other
 * tokens (a key collision) is refused with a warning (recur_log_set's callback) and the
 * restore goes on as a miss; a good one enters the first tier too. Either function may be
 * NULL. user is passed back to both; it must outlive the context or the next set_store.
 */
struct recur_prefix_store {
    void *user;
    void (*put)(void *user, uint64_t model, uint64_t tenant, const recur_token *tokens, int32_t n,
                const void *blob, size_t len);
    int32_t (*get)(void *user, uint64_t model, uint64_t tenant, const recur_token *tokens,
                   int32_t n, int32_t min_len, int32_t max_len, void **blob, size_t *len);
};
/* Sets (or, with NULL, removes) ctx's second tier; the struct is copied. False (error set)
 * when ctx has no prefix cache. */
RECUR_API bool recur_prefix_cache_set_store(struct recur_context *ctx,
                                            const struct recur_prefix_store *store);
/* False (error set) when the context has no cache. */
RECUR_API bool recur_prefix_cache_get_stats(const struct recur_context *ctx,
                                            struct recur_prefix_cache_stats *out);
/* The cache in a file (with the model's fingerprint; written to a temporary name and renamed),
 * and back: load adds the file's entries; a file of another model or a corrupt one is refused
 * and the cache is unchanged. */
RECUR_API bool recur_prefix_cache_save_file(const struct recur_context *ctx, const char *path);
/* Adds the entries of a file written by recur_prefix_cache_save_file (see above). */
RECUR_API bool recur_prefix_cache_load_file(struct recur_context *ctx, const char *path);

/* ---- vocabulary -------------------------------------------------------------------------- */

/* The most tokens recur_tokenize makes of text_len bytes: an invalid byte may become U+FFFD's
 * three bytes' tokens, and BOS and EOS may be added. */
#define RECUR_TOKENS_MAX(text_len) (3 * (text_len) + 2)
/* Tokenises text (text_len bytes, any bytes) into tokens. Returns the number of tokens, or the
 * negated number needed when n_tokens_max is too small (tokens' contents are then
 * unspecified); INT32_MIN with the error set on a bad argument. Invalid UTF-8 round-trips as
 * byte tokens, and never becomes a control token: where a byte-level BPE vocabulary (gpt2)
 * lacks a byte's token (GPT-NeoX's lacks those UTF-8 never uses), the byte is read as U+FFFD,
 * as llama.cpp reads it, never as the unknown token. At most RECUR_TOKENS_MAX(text_len) tokens
 * come out.
 * add_special: add BOS / EOS when the model asks for them (never for an RWKV world vocabulary,
 * as in llama.cpp). parse_special: control tokens written in the text become their ids.
 * INT32_MIN also for a byte that no token of an RWKV vocabulary starts with when it names no
 * unknown token (llama.cpp would emit the invalid id -1; real vocabularies have all 256). */
RECUR_API int32_t recur_tokenize(const struct recur_model *model, const char *text,
                                 int32_t text_len, recur_token *tokens, int32_t n_tokens_max,
                                 bool add_special, bool parse_special);
/* A run of bytes of a text: [off, off + len). */
struct recur_text_span {
    int32_t off, len;
};
/* As recur_tokenize with parse_special, except that a control token's text that overlaps one
 * of plain[0 .. n_plain) is not that token there: those bytes are tokenized as text, as
 * without parse_special. For a text put together from parts of different trust, e.g. a chat
 * from recur_chat_apply_template_spans: its template's markers are special tokens, its
 * messages' contents are not, so that a user who types "<|im_end|>" cannot close their own
 * turn and write another role's. The spans must be sorted by off, not overlap and lie within
 * the text; INT32_MIN with the error set otherwise (and as recur_tokenize). An RWKV world
 * vocabulary matches every token's text, control tokens included, wherever it is (as
 * llama.cpp's): spans change nothing there. */
RECUR_API int32_t recur_tokenize_except(const struct recur_model *model, const char *text,
                                        int32_t text_len, recur_token *tokens, int32_t n_tokens_max,
                                        bool add_special, const struct recur_text_span *plain,
                                        int32_t n_plain);
/* The text of a token (not NUL-terminated). Returns its length, or the negated size needed
 * when length is too small; 0 with the error set for an id out of range. lstrip: leading
 * spaces to drop; special: render control tokens (else they give ""). */
RECUR_API int32_t recur_token_to_piece(const struct recur_model *model, recur_token token,
                                       char *buf, int32_t length, int32_t lstrip, bool special);
/* The text of a token sequence (not NUL-terminated), with llama.cpp's clean-up of spaces
 * where the vocabulary asks for it; the negated size needed when text_len_max is too small;
 * INT32_MIN with the error set for an id out of range. */
RECUR_API int32_t recur_detokenize(const struct recur_model *model, const recur_token *tokens,
                                   int32_t n_tokens, char *text, int32_t text_len_max,
                                   bool remove_special, bool unparse_special);
/* The vocabulary's beginning-of-sequence token (tokenizer.ggml.bos_token_id), -1 when it has
 * none; -1 with the error set for a NULL model. Thread-safe: reads the loaded model only. */
RECUR_API recur_token recur_token_bos(const struct recur_model *model);
/* The vocabulary's end-of-sequence token (tokenizer.ggml.eos_token_id), where generation
 * stops, -1 when it has none; -1 with the error set for a NULL model. Thread-safe. */
RECUR_API recur_token recur_token_eos(const struct recur_model *model);
/* The vocabulary's fill-in-the-middle (code infilling) tokens, as llama.h's
 * llama_vocab_fim_pre and the others: prefix, suffix and middle, which an infill prompt is
 * made of (prefix text after PRE, suffix text after SUF, the answer after MID), then the
 * padding, repository and file separator tokens of the repository-level pattern. Each is read
 * from tokenizer.ggml.fim_{pre,suf,mid,pad,rep,sep}_token_id; the first three also from the
 * older tokenizer.ggml.{prefix,suffix,middle}_token_id, which win when both are present, as in
 * llama.cpp. -1 when the file names none (an id past the vocabulary is ignored with a warning
 * at load); -1 with the error set for a NULL model. Thread-safe: reads the loaded model only. */
RECUR_API recur_token recur_token_fim_pre(const struct recur_model *model);
/* FIM suffix: the suffix text follows it (see recur_token_fim_pre). */
RECUR_API recur_token recur_token_fim_suf(const struct recur_model *model);
/* FIM middle: ends an infill prompt; the model writes the missing middle after it. */
RECUR_API recur_token recur_token_fim_mid(const struct recur_model *model);
/* FIM padding (tokenizer.ggml.fim_pad_token_id; see recur_token_fim_pre). */
RECUR_API recur_token recur_token_fim_pad(const struct recur_model *model);
/* FIM repository: starts the repository-level pattern, before the project's name. */
RECUR_API recur_token recur_token_fim_rep(const struct recur_model *model);
/* FIM file separator: before each file's name in the repository-level pattern. */
RECUR_API recur_token recur_token_fim_sep(const struct recur_model *model);

/* UTF-8 text, checked strictly (RFC 3629): overlong forms, surrogates (U+D800..U+DFFF), code
 * points past U+10FFFF, stray continuation bytes and sequences cut short are invalid. Tokens
 * are bytes, so a piece may hold part of a character; these say where the valid text ends.
 *  - recur_utf8_valid: the length of the longest valid prefix of text[0..len), that is len
 *    when all of it is valid, else the byte offset of the first invalid sequence.
 *  - recur_utf8_char: the length (1 to 4) of the valid character at text[0..len), 0 when there
 *    is none (len is 0, the sequence is invalid, or len cuts it short).
 * text may be NULL only when len is 0; the caller keeps ownership. Neither allocates, keeps
 * state or sets the last error (invalid text is an answer, not a failure). Thread-safe. */
RECUR_API size_t recur_utf8_valid(const char *text, size_t len);
/* The length of the valid character at text[0..len), 0 when there is none (see above). */
RECUR_API size_t recur_utf8_char(const char *text, size_t len);

/* ---- chat templates ---------------------------------------------------------------------- */

/*
 * A chat is formatted into a model's prompt text by a chat template, as llama.cpp's
 * llama_chat_apply_template does: recur knows a fixed set of formats (the builtin templates,
 * recur_chat_builtin_templates: chatml, llama2, llama3, mistral-v1/-v3/-v3-tekken/-v7/-v7-tekken,
 * phi3, phi4, gemma, zephyr, deepseek, deepseek2, deepseek3, deepseek-r1, deepseek-v3.1,
 * command-r, granite, granite-4.0, granite-4.1, nemotron3, nemotron-v2, rwkv-world) and recognises
 * a model's Jinja chat_template text by the marker strings it contains (no Jinja is run). A model
 * without a template is formatted as "chatml" (RECUR_CHAT_TEMPLATE_DEFAULT), as llama.cpp does. The
 * text of a BOS token is never written: recur_tokenize with add_special adds BOS where the model
 * asks for it. Roles are "system", "user" and "assistant"; a format without a system role (gemma)
 * puts the system text at the start of the next user message.
 */
#define RECUR_CHAT_TEMPLATE_DEFAULT "chatml"

struct recur_chat_message {
    const char *role;    /* "system", "user" or "assistant" */
    const char *content; /* NUL-terminated text */
};

/* Formats chat[0 .. n_msg) with tmpl: a builtin template NAME or a template's TEXT (recognised
 * by its markers). add_ass: end with the start of an assistant turn (the generation prompt;
 * llama2 and mistral formats have none beyond their "[/INST]" and ignore it). Writes the text
 * into buf (at most length bytes, NUL-terminated when the text and the NUL fit; when they do
 * not, buf holds the first length bytes without a NUL) and returns the text's whole length in
 * bytes without the NUL: a result >= length means call again with a buffer of result + 1.
 * Nothing is kept; buf may be NULL when length is 0. Negative with recur_last_error() set:
 * tmpl is NULL or not recognised (the message lists the supported names), a message has a
 * NULL role or content or a role the format does not support (the message names it and its
 * index), chat is NULL with n_msg > 0, buf is NULL with length > 0, length < 0, or the text
 * would pass INT32_MAX bytes. */
RECUR_API int32_t recur_chat_apply_template(const char *tmpl, const struct recur_chat_message *chat,
                                            size_t n_msg, bool add_ass, char *buf, int32_t length);
/* As recur_chat_apply_template, and where each message's content lies in the text, in order
 * (white space a format trims is outside): the first min(n_spans_max, count) spans into spans,
 * the count (at most n_msg) into *n_spans. Hand them to recur_tokenize_except. spans may be NULL
 * when n_spans_max is 0; n_spans must not be NULL. */
RECUR_API int32_t recur_chat_apply_template_spans(const char *tmpl,
                                                  const struct recur_chat_message *chat,
                                                  size_t n_msg, bool add_ass, char *buf,
                                                  int32_t length, struct recur_text_span *spans,
                                                  int32_t n_spans_max, int32_t *n_spans);
/* The builtin template names into output[0 .. min(len, count)) (static strings, never freed);
 * returns how many exist. output may be NULL when len is 0. */
RECUR_API int32_t recur_chat_builtin_templates(const char **output, size_t len);
/* The builtin name (a static string) that tmpl, a name or a template text, resolves to; NULL
 * with the error set when tmpl is NULL or not recognised. */
RECUR_API const char *recur_chat_template_name(const char *tmpl);
/* The model's chat template text: GGUF key tokenizer.chat_template, or
 * tokenizer.chat_template.NAME when name is not NULL. Owned by the model (valid until
 * recur_model_free). NULL with the error set when the model has no such key, the key is not a
 * string or holds a NUL byte, or model is NULL. */
RECUR_API const char *recur_model_chat_template(const struct recur_model *model, const char *name);

/* ---- tool calls -------------------------------------------------------------------------- */

/*
 * Tool (function) calls, as OpenAI's chat API and llama.cpp's --jinja tool support: the tools
 * (OpenAI's "tools" JSON array: [{"type": "function", "function": {"name", "description",
 * "parameters": JSON schema}}]) are written into the prompt as the template's family writes
 * them, the model's output is constrained by a grammar of the family's call syntax (applied
 * lazily for tool_choice auto: only from the family's call opener on, so free text stays
 * free), and the generated text is parsed back into content and calls.
 *
 * Families (recur_chat_tool_format names them), recognised by the template's markers:
 *  "hermes"   Qwen 2.5 / Qwen 3 templates (chatml with "# Tools ... <tools></tools>"): the tools
 *             one JSON object a line in the system turn (Qwen 2.5 writes its default system
 *             text when the chat has none), calls "<tool_call>\n{"name": N, "arguments": A}\n
 *             </tool_call>", results in "<tool_response>\n...\n</tool_response>" inside a user
 *             turn (consecutive results share one). Trigger "<tool_call>".
 *  "granite"  Granite 4.0 / 4.1 templates: as hermes in Granite's turns and words (the
 *             templates' "You are a helpful assistant with access to the following tools. ..."
 *             block, no default system text; each result opens with a new line).
 *  "mistral"  Mistral Small 3.2 and Devstral templates ([SYSTEM_PROMPT] with [TOOL_CALLS] and
 *             [ARGS]): "[AVAILABLE_TOOLS]" + the tools' JSON list + "[/AVAILABLE_TOOLS]" before
 *             the last user message (Small 3.2) or after the system prompt (Devstral), calls
 *             "[TOOL_CALLS]" N ("[CALL_ID]" id: Small 3.2) "[ARGS]" A after the text (Small 3.2
 *             drops the text of a message with calls), results "[TOOL_RESULTS]" (id
 *             "[TOOL_CONTENT]": Small 3.2) content "[/TOOL_RESULTS]". The call ids are written
 *             as given (the templates want 9 letters or digits). Trigger "[TOOL_CALLS]".
 *  "mistral-nemo"  Mistral Nemo ([INST] blocks): "[AVAILABLE_TOOLS][...][/AVAILABLE_TOOLS]"
 *             (each function's fields as the template writes them) before the last user
 *             message's block, calls "[TOOL_CALLS][{"name", "arguments", "id"}, ...]", results
 *             "[TOOL_RESULTS]{"content": C, "call_id": "ID"}[/TOOL_RESULTS]". Trigger
 *             "[TOOL_CALLS]".
 *  "llama3"   Llama 3.1 / 3.2 / 3.3 templates ("Environment: ipython"): the system turn opens
 *             with "Environment: ipython\n" (the date header is the caller's system text, as
 *             without tools), the tools (JSON, indent 4, each followed by a blank line) after
 *             the templates' instructions at the start of the first user message (which is
 *             trimmed), a call as the assistant's whole text {"name": N, "parameters": A} (one
 *             call a message; parallel_tool_calls gives one call too), a result as an
 *             "ipython" turn holding the content as a JSON string (as the templates' tojson of
 *             a string writes it). Trigger "{\"name\"".
 *  "generic"  every other template (and builtin names): recur's own format over the
 *             template's plain turns. The system turn (the first system message, or a new one)
 *             ends with "\n\n" (when it has text) and:
 *               You can call tools. The tools (name, description and the JSON schema of the
 *               arguments):
 *               <the tools' "function" objects as a JSON list, indent 2>
 *
 *               To call tools, answer with only a JSON object: {"tool_calls": [{"name":
 *               <tool name>, "arguments": <arguments object>}]} (several calls in the list
 *               to call several tools at once). Otherwise, answer in plain text.
 *             An assistant message with calls is its content, a new line when there is
 *             content, then {"tool_calls": [{"name": N, "arguments": A}, ...]}; a tool result
 *             is a user message {"tool_response": {"tool_call_id": ID, "name": N, "content":
 *             C}} (fields that are NULL left out). Trigger "{\"tool_calls\"".
 * JSON is printed as the templates' tojson (Python json.dumps, ensure_ascii false, keys in the
 * given order).
 */
struct recur_tool_call {
    const char *id;        /* the call's id (NULL: none) */
    const char *name;      /* the function's name */
    const char *arguments; /* the arguments: JSON object text */
};

struct recur_chat_tool_message {
    const char *role;    /* "system", "user", "assistant" or "tool" */
    const char *content; /* NUL-terminated text; NULL: none (an assistant message of calls) */
    const struct recur_tool_call *tool_calls; /* assistant: its calls (NULL when none) */
    size_t n_tool_calls;
    const char *tool_call_id; /* tool: the call it answers (NULL: none) */
    const char *name;         /* tool: the function's name (NULL: none) */
};

/* The tool-call family of tmpl (a builtin name or a template's text): "hermes", "granite",
 * "mistral", "mistral-nemo", "llama3" or "generic"
 * (static strings). NULL with the error set when tmpl is NULL or not a template recur knows. */
RECUR_API const char *recur_chat_tool_format(const char *tmpl);
/* The text that opens a call in tmpl's family (the lazy grammar's trigger; static). NULL with
 * the error set as recur_chat_tool_format. */
RECUR_API const char *recur_chat_tool_trigger(const char *tmpl);
/* As recur_chat_apply_template_spans, for chats with tools: tools is the tools JSON array text
 * (NULL or "[]": none, and a chat without tool messages or calls then renders exactly as
 * recur_chat_apply_template does). The spans cover the texts from the chat and the tools
 * (contents, names, arguments, tools' JSON) so that they are tokenized as plain text (where
 * the format trims or moves a content, the whole content is one span); their count goes to
 * *n_spans (it may pass n_msg: call with n_spans_max 0 first to learn it); spans may be NULL
 * when n_spans_max is 0. Content may be NULL only on assistant messages. Negative with the
 * error set: as recur_chat_apply_template_spans, tools that are not valid (not a JSON array of
 * {"type": "function", "function": {"name", ...}}, a name missing, not [A-Za-z0-9_.-] or used
 * twice: the message names the tool), an assistant call with a NULL name or arguments that
 * are not a JSON object (the message names the message and the call), tool_calls NULL with
 * n_tool_calls > 0; llama3: tools without a user message to carry them, two calls in one
 * message, a tool result that does not follow an assistant message. */
RECUR_API int32_t recur_chat_apply_template_tools(const char *tmpl,
                                                  const struct recur_chat_tool_message *chat,
                                                  size_t n_msg, const char *tools, bool add_ass,
                                                  char *buf, int32_t length,
                                                  struct recur_text_span *spans,
                                                  int32_t n_spans_max, int32_t *n_spans);

enum recur_tool_choice {
    RECUR_TOOL_CHOICE_AUTO,     /* text or calls: the grammar is lazy (from the trigger on) */
    RECUR_TOOL_CHOICE_REQUIRED, /* calls only, from the first token */
    RECUR_TOOL_CHOICE_FUNCTION, /* calls of one named function only, from the first token */
};

/* The GBNF grammar (root "root"; malloc'd, the caller frees it) of tmpl's family's calls of
 * the tools (JSON array text), each call's arguments constrained by its tool's "parameters"
 * schema (recur_json_schema_to_grammar; a tool without parameters takes any JSON object):
 * one call, or with parallel one or more. function: the only tool allowed with
 * RECUR_TOOL_CHOICE_FUNCTION (NULL otherwise). *lazy is set true for AUTO (apply it with
 * recur_sampler_init_grammar_lazy and recur_chat_tool_trigger: the grammar starts with the
 * trigger's text), false otherwise. NULL with the error set: tools invalid (as above), empty,
 * a parameters schema refused by recur_json_schema_to_grammar (the message names the tool),
 * function NULL or not among the tools for FUNCTION, or an unknown choice. Tool choice "none"
 * needs no grammar (the tools are still rendered; the answer is text). */
RECUR_API char *recur_chat_tools_grammar(const char *tmpl, const char *tools,
                                         enum recur_tool_choice choice, const char *function,
                                         bool parallel, bool *lazy);

/* A generated text split into content and calls by recur_chat_parse_tool_calls. */
struct recur_tool_calls {
    char *content; /* the text outside the calls (NUL-terminated, maybe empty) */
    size_t n_calls;
    struct recur_tool_call *calls; /* id NULL; name and arguments (compact JSON object text) */
};
/* Parses text[0 .. len) generated with tmpl's family into a malloc'd result (free it with
 * recur_tool_calls_free): the calls from the first trigger on, in order; the text before them
 * is the content (trailing white space removed when calls follow). Text from the trigger on that
 * is not a complete, valid call (a call cut off by the length limit, bad JSON, a call without
 * a string name or an object of arguments) stays content with no calls. NULL with the error
 * set on allocation failure or a tmpl recur does not know. */
RECUR_API struct recur_tool_calls *recur_chat_parse_tool_calls(const char *tmpl, const char *text,
                                                               size_t len);
RECUR_API void recur_tool_calls_free(struct recur_tool_calls *calls); /* NULL is fine */

/* ---- sampling ---------------------------------------------------------------------------- */

/* Samplers turn a row of logits into a token, as llama.cpp's llama_sampler: a sampler filters
 * or reorders candidates (top-k, top-p, min-p, temperature, penalties) or selects one
 * (greedy, dist), and a chain applies samplers in order. Candidates are ranked by logit and
 * equal logits by id (lower first), so every result is deterministic; NaN logits count as
 * -INFINITY, and a token whose logit is -INFINITY is never chosen.
 *
 * Ownership: each recur_sampler_init_* / recur_sampler_chain_* function returns a sampler the
 * caller owns and frees with recur_sampler_free, unless it was handed to a chain, which then
 * owns it (and frees it with itself). Errors: NULL or -1, with recur_last_error() set. A
 * sampler is used by one thread at a time; separate samplers may run in parallel. */
struct recur_sampler;

/* A bias added to one token's logit before any other sampler (llama_logit_bias); -INFINITY
 * bans the token. */
struct recur_logit_bias {
    recur_token token;
    float bias;
};

struct recur_sampler_params {
    uint64_t seed;          /* of the dist sampler (default 0xdecaf); equal seeds, equal draws */
    float temp;             /* temperature (default 0.8); <= 0: greedy */
    int32_t top_k;          /* keep the k most likely (default 40); <= 0: off */
    float top_p;            /* keep the smallest set with this probability mass (default 0.95);
                               >= 1: off */
    float min_p;            /* keep p >= min_p * the largest p (default 0.05); <= 0: off */
    int32_t penalty_last_n; /* penalise the last n accepted tokens (default 64); <= 0: off */
    float penalty_repeat;   /* logit > 0 ? logit / r : logit * r (default 1.0: off; > 0) */
    float penalty_freq;     /* logit -= count * freq (default 0) */
    float penalty_present;  /* logit -= present, once per token in the window (default 0) */
    int32_t n_logit_bias;   /* entries of logit_bias (default 0: none) */
    const struct recur_logit_bias *logit_bias; /* copied by recur_sampler_chain_default; the
                                                  caller keeps ownership */
};

/* The defaults written beside each field above; never fails. */
RECUR_API struct recur_sampler_params recur_sampler_default_params(void);

/* The chain of llama.cpp's common sampling: logit bias (when n_logit_bias > 0) -> penalties ->
 * top-k -> top-p -> min-p -> temperature -> dist; temp <= 0: [logit bias ->] penalties ->
 * greedy. Sized for the model's vocabulary, so sampling does not allocate. NULL when model is
 * NULL, a parameter is NaN, penalty_repeat <= 0 or a logit bias is invalid (as
 * recur_sampler_init_logit_bias; the message names the field), or on allocation failure. */
RECUR_API struct recur_sampler *recur_sampler_chain_default(const struct recur_model *model,
                                                            struct recur_sampler_params params);

/* An empty chain. */
RECUR_API struct recur_sampler *recur_sampler_chain_init(void);
/* Appends smpl to chain, which takes ownership of it in every case (on failure it is freed).
 * Returns false on allocation failure or when chain is NULL or not a chain; when smpl is NULL it
 * returns false leaving the error of the init that failed, so that
 * `ok = recur_sampler_chain_add(chain, recur_sampler_init_top_k(40))` needs one check. */
RECUR_API bool recur_sampler_chain_add(struct recur_sampler *chain, struct recur_sampler *smpl);

/* Selects the most likely token (equal logits: the lowest id). */
RECUR_API struct recur_sampler *recur_sampler_init_greedy(void);
/* Adds bias[i].bias to the logit of token bias[i].token (a token named twice gets both; bias
 * -INFINITY bans it). Put it first in a chain, as recur_sampler_chain_default does. The array
 * is copied. NULL with the error set when n_vocab < 1, n_bias < 0, bias is NULL with n_bias >
 * 0, a token is not in 0 .. n_vocab-1, a bias is NaN or +INFINITY, or without memory. */
RECUR_API struct recur_sampler *recur_sampler_init_logit_bias(int32_t n_vocab, int32_t n_bias,
                                                              const struct recur_logit_bias *bias);
/* Selects at random from the softmax of the candidates, with its own generator: the same seed
 * gives the same tokens on every machine. recur_sampler_reset restarts it from the seed. */
RECUR_API struct recur_sampler *recur_sampler_init_dist(uint64_t seed);
/* Divides the logits by temp; temp <= 0 keeps only the most likely token. */
RECUR_API struct recur_sampler *recur_sampler_init_temp(float temp);
/* Keeps the k most likely tokens; k <= 0: no change. */
RECUR_API struct recur_sampler *recur_sampler_init_top_k(int32_t k);
/* Keeps the most likely tokens until their probability mass reaches p, and at least min_keep
 * of them (0 counts as 1); p >= 1: no change. */
RECUR_API struct recur_sampler *recur_sampler_init_top_p(float p, size_t min_keep);
/* Keeps the tokens whose probability is at least min_p times the largest one, and at least
 * min_keep (0 counts as 1); min_p <= 0: no change. */
RECUR_API struct recur_sampler *recur_sampler_init_min_p(float min_p, size_t min_keep);
/* Penalises the tokens among the last last_n accepted ones (<= 0: none): repeat as in
 * llama.cpp (logit > 0 ? logit / repeat : logit * repeat; 1: off, must be > 0), then logit -=
 * count * freq + present. recur_sampler_reset empties the window. */
RECUR_API struct recur_sampler *recur_sampler_init_penalties(int32_t last_n, float repeat,
                                                             float freq, float present);

/* Structured output. A grammar sampler removes every candidate token that the GBNF grammar
 * (llama.cpp's syntax: rules `name ::= ...`, alternatives `|`, groups, strings, character
 * classes `[a-z]` `[^...]`, `.`, `* + ? {m} {m,} {m,n}`, escapes \x \u \U \t \r \n, `#`
 * comments; not token references `<...>`) cannot accept next, and allows the end-of-sequence
 * token only where the root rule is complete. Put it first in a chain, so that the other
 * samplers see only allowed tokens. It follows the text through recur_sampler_accept, which
 * it needs for every generated token (recur_sampler_sample does it), but NOT for the prompt's
 * tokens: accept those into the other samplers before adding this one to a chain, or keep it
 * apart. A token may end inside a UTF-8 character or span several grammar symbols.
 * recur_sampler_reset goes back to the grammar's start.
 *
 * grammar: NUL-terminated GBNF text (copied); root: the start rule (NULL: "root"). The model
 * must outlive the sampler. NULL with the error set when the grammar is invalid ("grammar:
 * line L, column C: what"), names an undefined rule, defines one twice, is left-recursive
 * (a rule that reaches itself before matching a character), lacks the root, would cost the
 * matcher without bound (more than 1,024 parse stacks, or 1,024 nested rules, in one
 * expansion: "rule 'R' ... (a limit)"), or on allocation failure. Sampling fails (-1, error
 * set) when no candidate can continue the grammar, when one token's matching passes its
 * limits (1,048,576 stacks looked at, 1,024 parses at once), or after a token the grammar
 * rejects was accepted. Cost per step follows the part of the vocabulary the grammar allows
 * there (a walk of the vocabulary's byte trie), not the whole vocabulary times the grammar's
 * work per token. */
RECUR_API struct recur_sampler *recur_sampler_init_grammar(const struct recur_model *model,
                                                           const char *grammar, const char *root);
/* As recur_sampler_init_grammar, applied lazily (llama.cpp's lazy grammars): the sampler
 * constrains nothing until the generated text (the accepted tokens' texts) contains one of
 * the trigger words (n_triggers NUL-terminated strings, copied); from that trigger's first
 * byte on, the text is the grammar's (the trigger's own text and whatever followed it in the
 * same token are fed to the grammar, so the grammar must start with the trigger) and every
 * later token is constrained. A trigger may be split across tokens. The end-of-sequence token
 * is free before a trigger. recur_sampler_reset goes back to unconstrained. NULL with the
 * error set as recur_sampler_init_grammar, or when triggers is NULL, n_triggers is 0 or a
 * trigger is NULL or empty. A triggered text the grammar rejects makes the next sampling fail
 * (-1, error set). */
RECUR_API struct recur_sampler *
recur_sampler_init_grammar_lazy(const struct recur_model *model, const char *grammar,
                                const char *root, const char *const *triggers, size_t n_triggers);
/* A GBNF grammar (root rule "root") for the JSON texts that a JSON schema describes, as a
 * malloc'd NUL-terminated string the caller frees with free(). The keywords taken, listed with
 * their limits in docs/json-schema.md (all that zod 4 and Pydantic write by default, but
 * bounds on a number other than 0): type, properties / required / additionalProperties,
 * propertyNames (a schema of strings), items / prefixItems / additionalItems / minItems /
 * maxItems (lists and tuples), minLength / maxLength, pattern (a simple anchored regex; it
 * wins over a format beside it, as in llama.cpp), format date / time / date-time / uuid
 * (llama.cpp's rules), integer bounds within +-(2^53 - 1) (minimum, maximum, exclusiveMinimum,
 * exclusiveMaximum; exact), number bounds of 0 (the sign), enum, const, anyOf, oneOf, allOf of
 * one schema, $ref into $defs or definitions, and annotations (title, description, default,
 * examples, $schema, $id, $comment, readOnly, ...). With properties, extra properties are
 * never generated. Any other keyword or value (not, uniqueItems, format email, minimum 1 on a
 * number, ...) is refused: NULL with the error naming it and where it is ("json schema: at
 * '/properties/a': keyword 'not' is not supported with type string"), as are a NULL schema,
 * text that is not JSON or not UTF-8, and schemas nested more than 64 deep. Any thread may
 * call it. */
RECUR_API char *recur_json_schema_to_grammar(const char *schema);

/* Samples from the logits of output idx of the last recur_decode (as recur_get_logits_ith:
 * idx < 0 counts from the end), accepts the token (penalties remember it) and returns it.
 * -1 with the error set when there are no such logits, or when the sampler selects nothing
 * (a chain must end with greedy or dist). */
RECUR_API recur_token recur_sampler_sample(struct recur_sampler *smpl, struct recur_context *ctx,
                                           int32_t idx);
/* The same from the caller's logits (n_vocab floats, not kept). */
RECUR_API recur_token recur_sampler_sample_logits(struct recur_sampler *smpl, const float *logits,
                                                  int32_t n_vocab);
/* After a recur_sampler_sample / _sample_logits on smpl: the candidates its selector (greedy or
 * dist) chose from, i.e. those the filters kept, with the logits that bias, penalties and
 * temperature left them; their probabilities are the softmax of those logits (so with temp
 * <= 0 the chain's greedy sees every token, and the probabilities are the biased, penalised
 * model distribution). Writes the n most probable (fewer when fewer were left), most probable
 * first (equal ones: lower id first), to ids[] and probs[] and returns how many; 0 before the
 * first sample or after a failed one. -1 with the error set when smpl, ids or probs is NULL,
 * n < 0, or without memory. What llama-server's n_probs reports with post_sampling_probs. */
RECUR_API int32_t recur_sampler_get_probs(const struct recur_sampler *smpl, recur_token *ids,
                                          float *probs, int32_t n);
/* The probability of token among the same candidates (0 when the filters removed it, or
 * before the first sample); -1 with the error set when smpl is NULL. */
RECUR_API float recur_sampler_get_prob(const struct recur_sampler *smpl, recur_token token);
/* Tells the sampler that token was chosen (recur_sampler_sample does it itself): for tokens
 * of the prompt, so that penalties see them. NULL smpl: nothing, with the error set. */
RECUR_API void recur_sampler_accept(struct recur_sampler *smpl, recur_token token);
/* Forgets the accepted tokens and reseeds dist samplers with their seed; NULL: nothing, with
 * the error set. */
RECUR_API void recur_sampler_reset(struct recur_sampler *smpl);
/* "greedy", "dist", "temp", "top-k", "top-p", "min-p", "penalties", "logit-bias", "grammar" or
 * "chain" (a static string); NULL with the error set for a NULL smpl. */
RECUR_API const char *recur_sampler_name(const struct recur_sampler *smpl);
RECUR_API void recur_sampler_free(struct recur_sampler *smpl); /* NULL is fine */

#ifdef __cplusplus
}
#endif

#endif /* RECUR_H */
