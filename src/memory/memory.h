/*
 * memory: the recurrent state memory (llama.cpp's llama_kv_cache_recurrent, in C).
 *
 * A recurrent model keeps one fixed-size state per sequence. The memory owns `size` cells;
 * each cell holds, for every layer, one K row (the small conv / token-shift state) and one V
 * row (the large ssm / wkv state). It knows nothing of any model: rows are opaque elements of
 * type_k / type_v, and the model reads and writes them through rmem_k_data / rmem_v_data.
 *
 * Data structures, chosen for thousands of sequences:
 *  - per cell: pos (last position folded into the state, -1 when free), src (for the cells of
 *    the current block: where its state is gathered from, -1 = zeros), and the number of
 *    sequences sharing it with the head of an intrusive doubly linked list of them;
 *  - per sequence: tail (the cell holding its state, -1 = none) and its list links.
 *    A sequence has at most one state, so "cell c has sequence s" is tail[s] == c: O(1)
 *    membership with no per-cell set at all, and moving a cell (swap, eviction) relinks only
 *    the sequences that share it.
 *  - the layer data: per layer one K buffer and one V buffer of `size` rows each, so the cells
 *    [head, head+n) of a block are one contiguous run of rows per layer.
 *
 * Forks are copy on write: seq_cp makes the destination share the source's cell; the copy is
 * made only when one of them is next decoded (find_slot gives it a cell of its own, and the
 * compute gathers the old state in through s_copy).
 *
 * Placing a ubatch (find_slot) picks a window [head, head+n) of cells for its n streams,
 * preferring windows that need no eviction and keep states in place; cells in the window that
 * hold other sequences' states are moved out (their rows are copied at once). Every stream then
 * owns slot head+s, and s_copy(s) / s_mask(s) say where its state comes from. Slot order is
 * stream order, so a caller that decodes the same sequences step after step computes in place.
 *
 * Contract with the compute, per ubatch: call rmem_bctx_apply (or rmem_find_slot); then, for
 * every layer, rmem_layer_begin gives the states of the block's slots as f32 rows (read from
 * row rmem_s_copy(i), zeros where rmem_s_mask(i) is 0), the compute updates them in that
 * buffer, and rmem_layer_end stores them into rows head .. head+n-1. All reads of a layer
 * happen in begin and all writes in end, because sources may lie inside the block; when
 * nothing moves and states are f32 the buffer is the block's own rows and neither copies.
 * The metadata already describes the memory as it will be after the compute; a caller that
 * does not compute leaves the placed sequences with stale rows.
 *
 * Errors: functions that can fail return false / a status and set the last error (core.h).
 * Not thread-safe: one thread uses one memory at a time.
 */
#ifndef RECUR_MEMORY_H
#define RECUR_MEMORY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../batch/batch.h"
#include "../core/core.h"
#include "../io/io.h"

struct rmem;
struct rmem_kv;
struct rmem_kv_params;

struct rmem_params {
    uint32_t n_layer;       /* >= 1 */
    const uint32_t *k_row;  /* [n_layer] elements of a K row per cell in each layer (0 allowed) */
    const uint32_t *v_row;  /* [n_layer] elements of a V row per cell in each layer (0 allowed) */
    enum rcore_type type_k; /* f32, f16 or bf16 */
    enum rcore_type type_v;
    uint32_t n_cells;   /* >= 1; fewer cells than sequences is allowed (batches may not fit) */
    uint32_t n_seq_max; /* >= 1; sequence ids are 0 .. n_seq_max-1 */
    /* NULL for a recurrent model. A hybrid model's attention part (see "the attention part"
       below), with the same n_layer and n_seq_max: every sequence operation and batch then
       applies to both parts, all or nothing. */
    const struct rmem_kv_params *attn;
};

/* Creates a memory with every cell free and all rows zero. Returns NULL with the last error
 * set on invalid parameters ("n_layer is 0", "layer 3: K row of 4294967295 elements overflows")
 * or when memory cannot be had. Free with rmem_free. */
struct rmem *rmem_create(const struct rmem_params *params);
void rmem_free(struct rmem *mem); /* NULL is fine */

/* ---- shape and size ---------------------------------------------------------------------- */

uint32_t rmem_size(const struct rmem *mem); /* cells */
uint32_t rmem_used(const struct rmem *mem); /* cells holding at least one sequence */
uint32_t rmem_n_seq_max(const struct rmem *mem);
uint32_t rmem_n_layer(const struct rmem *mem);
enum rcore_type rmem_type_k(const struct rmem *mem);
enum rcore_type rmem_type_v(const struct rmem *mem);
size_t rmem_bytes_k(const struct rmem *mem); /* all K rows of all cells and layers */
size_t rmem_bytes_v(const struct rmem *mem);
size_t rmem_bytes_total(const struct rmem *mem); /* K + V */
/* The attention part of a hybrid memory, NULL for a recurrent one. The sequence operations
 * below keep it in step with the recurrent part: use those, not rmem_kv_seq_*, on it. */
struct rmem_kv *rmem_attn(struct rmem *mem);
const struct rmem_kv *rmem_attn_const(const struct rmem *mem);

/* ---- sequence operations (llama.cpp's llama_memory_seq_* semantics) ---------------------- */

/* Forgets every sequence; with data, also zeroes every row. */
void rmem_clear(struct rmem *mem, bool data);

/* In a hybrid memory, each sequence's attention rows follow its recurrent state: an operation
 * that changes the state's position or drops it does the same to the rows, and one the rows
 * cannot follow fails with nothing changed in either part. */

/* Removes the positions [p0, p1) of seq (p0 < 0: 0; p1 < 0: to the end); seq < 0: every
 * sequence. A state can only go whole: a range that cuts it (0 < p0 <= pos, or 0 < p1 <= pos)
 * returns false and changes nothing; so does seq < 0 with a range other than all or empty, and
 * seq >= n_seq_max. A range past the state, or a sequence that holds nothing, returns true.
 * The exception is the tail (0 < p0 <= pos, p1 < 0) when a snapshot before p0 is kept
 * (rmem_snap_config): seq goes back to the newest such snapshot (its later ones are dropped)
 * and seq_pos_max says which position it holds; it fails, changing nothing, when the state is
 * shared with other sequences and no cell is free for the rolled-back copy. In a hybrid memory
 * the attention rows after the position the state keeps go with it. */
bool rmem_seq_rm(struct rmem *mem, int32_t seq, int32_t p0, int32_t p1);

/* Makes dst share src's state (dst's own state is dropped first). A recurrent state is copied
 * whole: p0 and p1 are ignored, as in llama.cpp. src == dst, or an id out of range, does
 * nothing. No row is copied here (copy on write). False (error set, nothing changed) only in a
 * hybrid memory out of memory for dst's page table. */
bool rmem_seq_cp(struct rmem *mem, int32_t src, int32_t dst, int32_t p0, int32_t p1);

/* Drops every sequence except seq (seq out of range: drops all). */
void rmem_seq_keep(struct rmem *mem, int32_t seq);

/* Moves the position of seq's state by delta when it lies in [p0, p1). Only the position
 * changes: recurrent states do not depend on absolute positions. Sequences sharing the state
 * move with it (they share one position). A position pushed below 0 drops the state, as
 * llama.cpp's KV cache drops tokens shifted below 0. In a hybrid memory the attention rows in
 * [p0, p1) of every sequence sharing the state move too (their rows are dropped with it); false,
 * nothing changed, when they cannot (rmem_kv_seq_add), true otherwise. */
bool rmem_seq_add(struct rmem *mem, int32_t seq, int32_t p0, int32_t p1, int32_t delta);

/* Divides the position of seq's state by d (d >= 1; d <= 0 is ignored) when in [p0, p1); the
 * attention rows as rmem_seq_add moves them. */
bool rmem_seq_div(struct rmem *mem, int32_t seq, int32_t p0, int32_t p1, int d);

/* The position held by seq, -1 when none. pos_min is the oldest position seq can be taken
 * back to (its oldest snapshot; pos_max without snapshots). */
int32_t rmem_seq_pos_min(const struct rmem *mem, int32_t seq);
int32_t rmem_seq_pos_max(const struct rmem *mem, int32_t seq);

/* True for a recurrent memory (shifting positions never touches a recurrent state); a hybrid
 * one's attention part says (rmem_kv_can_shift). */
bool rmem_can_shift(const struct rmem *mem);

/* The cell holding seq's state, -1 when none or seq out of range. Sequences with the same
 * tail share one state. */
int32_t rmem_seq_tail(const struct rmem *mem, int32_t seq);

/* ---- snapshots: rollback of a sequence's tail (snapshot.c) -------------------------------- */

/* A copy of one sequence's state at some position: every layer's K row then V row, as f32. */
struct rmem_snap;

/*
 * Turns snapshots on (or off: both counts 0) and drops every snapshot kept so far. Each
 * sequence keeps the states after its last n_rollback positions and after every position p
 * with (p + 1) % checkpoint_every == 0, within max_bytes of snapshots for the whole memory
 * (the oldest go first). Snapshots are dropped with their sequence, shared by seq_cp, moved by
 * seq_add / seq_div. False (error set, snapshots off) when memory cannot be had.
 */
bool rmem_snap_config(struct rmem *mem, uint32_t n_rollback, uint32_t checkpoint_every,
                      size_t max_bytes);
size_t rmem_snap_block_bytes(const struct rmem *mem); /* bytes of one snapshot */
size_t rmem_snap_bytes_live(const struct rmem *mem);  /* bytes of the snapshots kept */
uint32_t rmem_snap_count(const struct rmem *mem, int32_t seq);
/* Position of seq's i-th snapshot (increasing with i), -1 when there is none. */
int32_t rmem_snap_pos(const struct rmem *mem, int32_t seq, uint32_t i);
/*
 * For the ubatch just placed: dst[t] (n_tokens entries) is the snapshot the compute must fill
 * with the state after ubatch token t, or NULL. The snapshots are already in their sequences'
 * lists: the compute fills every one of them before the memory is used again. A snapshot the
 * budget cannot hold (or memory for it) is skipped: that position cannot be rolled back to.
 */
void rmem_snap_plan(struct rmem *mem, const struct rbatch_ubatch *ub, struct rmem_snap **dst);
/* Layer il's K (conv) and V (ssm) rows in a snapshot, laid out as the memory's rows. */
float *rmem_snap_k(const struct rmem *mem, struct rmem_snap *snap, uint32_t il);
float *rmem_snap_v(const struct rmem *mem, struct rmem_snap *snap, uint32_t il);

/* The data of seq's i-th snapshot (rmem_snap_block_bytes bytes), NULL when none. */
const float *rmem_snap_data(const struct rmem *mem, int32_t seq, uint32_t i);
/* seq's current state as one f32 block (the layout of a snapshot: rmem_snap_block_bytes
 * bytes into dst). False (error set) when seq holds none. */
bool rmem_seq_state_f32(const struct rmem *mem, int32_t seq, float *dst);
/* Replaces seq's state by block src (f32, a snapshot's layout) holding position pos; seq's
 * snapshots are dropped. seq gets a cell of its own; false (nothing changed) when its state is
 * shared and no cell is free, or the memory is a hybrid's (a block holds no attention rows). */
bool rmem_seq_set_state_f32(struct rmem *mem, int32_t seq, const float *src, int32_t pos);
/* The same for a hybrid memory's sequence: block src holding position pos, and its attention
 * rows from attn, a one-sequence stream of the attention part (rmem_kv_state_write_prefix)
 * whose rows must end at pos. False with the error set, nothing changed, when the memory is not
 * a hybrid's, no cell is free for a shared state, or the stream is bad, ends elsewhere or does
 * not fit. */
bool rmem_seq_set_state_hybrid(struct rmem *mem, int32_t seq, const float *src, int32_t pos,
                               struct rio_reader *attn);
/* The same, but attn's rows may go on past pos (rmem_kv_state_read_upto): those after it are
 * left out. */
bool rmem_seq_set_state_hybrid_upto(struct rmem *mem, int32_t seq, const float *src, int32_t pos,
                                    struct rio_reader *attn);

/* ---- batches ----------------------------------------------------------------------------- */

enum rmem_status {
    RMEM_OK = 0,
    RMEM_NO_ROOM = 1,  /* the batch needs more cells than the memory has; nothing changed */
    RMEM_INVALID = -1, /* the batch is invalid (last error says which token); nothing changed */
    RMEM_FAILED = -2,  /* out of memory; nothing changed */
};

struct rmem_batch_params {
    uint32_t n_ubatch; /* most tokens per ubatch, >= 1 */
    int32_t n_vocab;   /* token ids must be below; <= 0: not checked */
    bool embd_pooled;  /* one sequence per ubatch (pooled embeddings) instead of equal split */
    bool logits_all;   /* every token produces an output row */
};

/* The batch context: the ubatches of one batch, placed one after another. */
struct rmem_bctx;

/*
 * Checks the batch, splits it into ubatches and makes sure every ubatch can be placed (a dry
 * run over the metadata, then restored): the transactional prepare. On RMEM_OK, *out is a
 * batch context positioned on the first ubatch, to be used as
 *     do { apply; compute the block } while (rmem_bctx_next(ctx));
 * and freed with rmem_bctx_free. On any other status *out is NULL, the last error says why,
 * and the memory is bit for bit what it was. The batch is not referenced after the call.
 */
enum rmem_status rmem_init_batch(struct rmem *mem, const struct rbatch_in *batch,
                                 const struct rmem_batch_params *params, struct rmem_bctx **out);

/* The current ubatch (valid until rmem_bctx_free). */
const struct rbatch_ubatch *rmem_bctx_ubatch(const struct rmem_bctx *ctx);
uint32_t rmem_bctx_n_ubatches(const struct rmem_bctx *ctx);
/* Places the current ubatch (find_slot). False only on an internal inconsistency, with the
 * last error set; the prepare guarantees room. */
bool rmem_bctx_apply(struct rmem_bctx *ctx);
/* Moves to the next ubatch; false when there is none. */
bool rmem_bctx_next(struct rmem_bctx *ctx);
/* Batch index of each output row, in the order the ubatches produce them. */
const int32_t *rmem_bctx_out_ids(const struct rmem_bctx *ctx, int32_t *n_outputs);
/* The validated positions of the batch tokens, in batch order (filled in when it had none). */
const int32_t *rmem_bctx_positions(const struct rmem_bctx *ctx);
void rmem_bctx_free(struct rmem_bctx *ctx); /* NULL is fine */

/*
 * Places one ubatch made by an equal or seq split: each stream gets a cell of its own
 * (copy on write for shared states), the cells become the contiguous block [head, head+n),
 * positions are updated. Returns false with the last error set and nothing changed when the
 * memory has too few cells ("no room: ...") or the ubatch contradicts the memory (a stream's
 * sequences hold different states). rmem_init_batch checks all of this up front.
 */
bool rmem_find_slot(struct rmem *mem, const struct rbatch_ubatch *ubatch);

/* ---- the block of the last placed ubatch, for the compute ---------------------------------- */

uint32_t rmem_head(const struct rmem *mem); /* first cell of the block */
uint32_t rmem_n(const struct rmem *mem);    /* cells in the block (= streams of the ubatch) */
/* Row to gather slot i's state from (a cell index; slot head+i itself when nothing moves). */
int32_t rmem_s_copy(const struct rmem *mem, uint32_t i);
/* 1 when slot i continues a state, 0 when it starts from zeros. Pure, like s_copy. */
float rmem_s_mask(const struct rmem *mem, uint32_t i);

/* The compute's view of layer il of the placed block (memory_compute.c): slot i's K state is
 * k[i * k_row .. (i + 1) * k_row), its V state v[i * v_row ..], as f32. */
struct rmem_layer {
    float *k, *v;        /* valid until rmem_layer_end; NULL for an empty row */
    size_t k_row, v_row; /* floats per slot */
};
/* Reads every state of layer il of the block (see the contract at the top). Layers are begun
 * and ended one at a time. False with the error set when out of memory for the gathered
 * copy, or when called out of order (no block placed, a layer still open). */
bool rmem_layer_begin(struct rmem *mem, uint32_t il, struct rmem_layer *out);
/* Writes layer il's new states (the buffer of rmem_layer_begin) into the block's rows. */
void rmem_layer_end(struct rmem *mem, uint32_t il);

/* Layer il's rows: cell c's row starts at data + c * row_bytes (for tests and state I/O; the
 * compute goes through rmem_layer_begin / _end). */
void *rmem_k_data(struct rmem *mem, uint32_t il);
void *rmem_v_data(struct rmem *mem, uint32_t il);
size_t rmem_k_row_bytes(const struct rmem *mem, uint32_t il);
size_t rmem_v_row_bytes(const struct rmem *mem, uint32_t il);

/* ---- state streams ----------------------------------------------------------------------- */

/*
 * Stream layout (integers little-endian, rows as stored):
 *   u32 magic "RMEM", u32 version, u32 n_layer, u32 cell_count,
 *   per cell: i32 pos, u32 n_seq, n_seq x i32 sequence id  (n_seq = 0 in a one-sequence stream)
 *   per layer: u32 type_k, u64 K row bytes, cell_count K rows
 *   per layer: u32 type_v, u64 V row bytes, cell_count V rows
 *   (version 2) snapshots: u32 lists, per list i32 sequence id (-1 in a one-sequence stream),
 *     u32 n, u64 floats per snapshot, n x (i32 position, floats x f32)
 *   u64 XXH64 of everything before it;
 *   (version 3, a hybrid memory's) the attention part's stream (rmem_kv_state_write).
 * Snapshots come back only into a memory with snapshots on, within its budget. A hybrid
 * memory reads version 3 streams only, the others versions 1 and 2.
 */

/* Bytes rmem_state_write would produce for seq (-1: the whole memory). */
size_t rmem_state_size(const struct rmem *mem, int32_t seq);

/* Writes the whole memory (seq = -1) or one sequence's state. False with the last error set
 * when the writer fails or seq is out of range. */
bool rmem_state_write(const struct rmem *mem, struct rio_writer *w, int32_t seq);

/*
 * Reads a stream made by rmem_state_write. seq = -1: replaces the whole memory. seq >= 0:
 * puts a one-sequence stream's state into sequence seq (its former state is dropped; other
 * sequences are untouched). A stream that is truncated, corrupt (checksum), or made for
 * another shape (layers, types, row sizes, too many cells, sequence ids out of range) is
 * refused with the last error saying what and where; the memory is then cleared (whole) or
 * seq holds nothing (one sequence): never half-written.
 */
bool rmem_state_read(struct rmem *mem, struct rio_reader *r, int32_t seq);

/* ---- checks for tests and debugging ------------------------------------------------------ */

/* XXH64 over all metadata and all rows: equal fingerprints mean bit-identical memories. */
uint64_t rmem_fingerprint(const struct rmem *mem);
/* Verifies every internal invariant; false with the last error naming the broken one. */
bool rmem_check(const struct rmem *mem);

/* ---- the attention part of a hybrid memory (kv.c) ---------------------------------------- */

/*
 * The K and V rows of every token of every sequence, for a model's attention layers, in pages
 * of page_rows tokens shared between sequences by reference counts (kv.c explains the layout).
 * Rows are opaque bytes: the compute encodes them (f32, f16, q8_0 ...) and names the encoding
 * in type_k / type_v, which state streams record and check. A layer may have empty rows (a
 * recurrent layer of a hybrid model).
 *
 * Sequence operations follow llama.cpp's on its KV cache, within what a hybrid sequence can
 * do (its recurrent state can be rolled back, not cut in the middle): seq_rm removes a tail;
 * seq_cp copies a whole sequence (sharing its pages); seq_add / seq_div move positions and
 * keep every sequence's positions in order. Those that can fail return false with the last
 * error set and change nothing. Not thread-safe: one thread uses one memory at a time.
 */
struct rmem_kv;

/* Rotates n consecutive K rows of layer il (encoded as type, a ggml type id, at rows) by
 * delta[i] positions each, in place: what a RoPE model's keys need when their positions move
 * (a rotation by p then by d is one by p + d). Called by seq_add and seq_div on a RoPE layout;
 * cannot fail. */
typedef void (*rmem_kv_rotate_fn)(void *user, uint32_t il, uint32_t type, void *rows, uint32_t n,
                                  const int32_t *delta);

struct rmem_kv_params {
    uint32_t n_layer;          /* >= 1 */
    const size_t *k_row_bytes; /* [n_layer] bytes of a token's K row in each layer (0: none) */
    const size_t *v_row_bytes; /* [n_layer] */
    uint32_t type_k, type_v;   /* the rows' encoding, a ggml type id (recorded, not read) */
    uint32_t page_rows;        /* >= 1: tokens a page holds */
    uint32_t n_pages;          /* >= 1: the budget, page_rows * n_pages tokens in all */
    uint32_t n_seq_max;        /* >= 1; sequence ids are 0 .. n_seq_max-1 */
    bool rope;                 /* K rows carry rotary embeddings: moving positions rotates them */
    rmem_kv_rotate_fn rotate;  /* with rope: rotates K rows (NULL: positions cannot move) */
    void *rotate_user;         /* rotate's first argument (kept, not owned) */
};

/* Creates an empty memory, every row zero. NULL with the last error set on invalid parameters
 * ("page_rows is 0", "layer 2: ... rows of ... bytes overflow") or when memory cannot be had.
 * Free with rmem_kv_free (NULL is fine). */
struct rmem_kv *rmem_kv_create(const struct rmem_kv_params *params);
void rmem_kv_free(struct rmem_kv *kv);

uint32_t rmem_kv_n_layer(const struct rmem_kv *kv);
uint32_t rmem_kv_page_rows(const struct rmem_kv *kv);
uint32_t rmem_kv_n_pages(const struct rmem_kv *kv);
uint32_t rmem_kv_n_free(const struct rmem_kv *kv); /* pages no sequence holds */
uint32_t rmem_kv_type_k(const struct rmem_kv *kv); /* the params' type_k and type_v */
uint32_t rmem_kv_type_v(const struct rmem_kv *kv);
/* False for a RoPE layout without a rotate function: seq_add and seq_div then refuse to move
 * positions. */
bool rmem_kv_can_shift(const struct rmem_kv *kv);

/* Forgets every sequence; with data, also zeroes every row. */
void rmem_kv_clear(struct rmem_kv *kv, bool data);
/* Removes seq's tokens at positions [p0, p1) (p0 < 0: 0; p1 < 0: to the end); seq < 0: of every
 * sequence. Only a tail can go: a range with tokens of seq after it returns false with the
 * error set and changes nothing (seq < 0: when that holds for any sequence). A range that
 * holds none of seq's tokens returns true; seq >= n_seq_max returns false. */
bool rmem_kv_seq_rm(struct rmem_kv *kv, int32_t seq, int32_t p0, int32_t p1);
/* The token count seq would keep after rmem_kv_seq_rm(seq, p0, p1): its count when the range
 * holds none of its tokens, -1 when the range is not a tail, -2 when seq is out of range. */
int32_t rmem_kv_seq_rm_at(const struct rmem_kv *kv, int32_t seq, int32_t p0, int32_t p1);
/* Makes dst hold src's tokens (dst's own are dropped), sharing src's pages: no row is copied
 * until one of them appends to a shared, partly filled last page. False (nothing changed) when
 * out of memory for dst's page table. src == dst, or an id out of range, does nothing. */
bool rmem_kv_seq_cp(struct rmem_kv *kv, int32_t src, int32_t dst);
/* Drops every sequence except seq (seq out of range: drops all). */
void rmem_kv_seq_keep(struct rmem_kv *kv, int32_t seq);
/* Adds delta to the positions in [p0, p1) of seq's tokens. On a RoPE layout the moved K rows
 * are rotated by delta (params.rotate), each once: a page the sequence shares with another is
 * copied first, so the other keeps its rows. False, nothing changed, when the layout has RoPE
 * and no rotate function, when a position would go below 0 or out of order with seq's other
 * tokens (llama.cpp drops tokens shifted below 0; a hybrid sequence cannot lose its head), or
 * when the shared pages to copy need more free pages than there are ("kv: ... needs N free
 * pages ..."). */
bool rmem_kv_seq_add(struct rmem_kv *kv, int32_t seq, int32_t p0, int32_t p1, int32_t delta);
/* Divides the positions in [p0, p1) of seq's tokens by d (d <= 1: nothing), rotating K rows by
 * each one's change as seq_add does. False as seq_add. */
bool rmem_kv_seq_div(struct rmem_kv *kv, int32_t seq, int32_t p0, int32_t p1, int d);
/* seq_add (d = 0) or seq_div (d >= 2) of the n sequences seqs (distinct, in range), all of
 * them or none: the checks (and the free pages the copies need, counted together) come
 * before anything changes. */
bool rmem_kv_seqs_shift(struct rmem_kv *kv, const int32_t *seqs, uint32_t n, int32_t p0, int32_t p1,
                        int32_t delta, int d);
/* seq's oldest and newest positions held, -1 when it holds none: the attention part's own,
 * where the recurrent part's pos_min is its oldest snapshot. */
int32_t rmem_kv_seq_pos_min(const struct rmem_kv *kv, int32_t seq);
int32_t rmem_kv_seq_pos_max(const struct rmem_kv *kv, int32_t seq);

/* seq's tokens (0 when out of range), its page table (ceil(n / page_rows) page ids; token i is
 * row i % page_rows of page pages[i / page_rows]) and their positions (n, non-decreasing);
 * NULL when it holds none. Valid until the memory next changes. */
uint32_t rmem_kv_seq_n(const struct rmem_kv *kv, int32_t seq);
const int32_t *rmem_kv_seq_pages(const struct rmem_kv *kv, int32_t seq);
const int32_t *rmem_kv_seq_positions(const struct rmem_kv *kv, int32_t seq);
/* Bytes of seq's rows, all layers (shared pages counted for each sequence). */
size_t rmem_kv_seq_bytes(const struct rmem_kv *kv, int32_t seq);

/* Layer il's rows: row r (page * page_rows + row in page) at data + r * row_bytes; NULL / 0
 * for an empty row or il out of range. */
void *rmem_kv_k_data(struct rmem_kv *kv, uint32_t il);
void *rmem_kv_v_data(struct rmem_kv *kv, uint32_t il);
size_t rmem_kv_k_row_bytes(const struct rmem_kv *kv, uint32_t il);
size_t rmem_kv_v_row_bytes(const struct rmem_kv *kv, uint32_t il);

/* Whether the ubatches of a batch, placed in order, fit: RMEM_OK; RMEM_NO_ROOM when they need
 * more pages than are free; RMEM_INVALID when a stream's sequences do not hold the same tokens
 * (they must share one page table and their positions, as after seq_cp), a sequence's
 * positions would go out of order, or a sequence would pass 2^31 tokens; RMEM_FAILED when out of
 * memory. The error says what. It changes no sequence; on RMEM_OK it has grown the arrays the
 * placements need, so that placing those ubatches in order with rmem_kv_place cannot fail. */
enum rmem_status rmem_kv_prepare(struct rmem_kv *kv, const struct rbatch_ubatch *ubs,
                                 uint32_t n_ubs);
/* Places one ubatch: every token gets a row, appended to each of its sequences (a stream's
 * sequences share it), with its position; a shared, partly filled last page is copied first.
 * False with the error set and nothing changed when it does not fit (rmem_kv_prepare) or out
 * of memory. The compute then writes token t's K and V rows at rmem_kv_token_row(t). */
bool rmem_kv_place(struct rmem_kv *kv, const struct rbatch_ubatch *ubatch);
/* The row of token t of the ubatch placed last, -1 when t is past it. */
int64_t rmem_kv_token_row(const struct rmem_kv *kv, uint32_t t);

/*
 * State streams of the attention part (integers little-endian):
 *   u32 magic "RKVC", u32 version 1, u32 n_layer, u32 page_rows, u32 n_seqs listed,
 *   u32 n_pages written,
 *   per sequence: i32 id (-1 in a one-sequence stream), u32 n, n x i32 position,
 *     ceil(n / page_rows) x u32 its pages (indices of the written pages),
 *   per written page: u32 rows in use (the most any listed table uses),
 *   per layer: u32 type_k, u64 K row bytes, u32 type_v, u64 V row bytes, then every written
 *     page's rows in use of K, then of V,
 *   u64 XXH64 of everything before it.
 * A page shared by listed sequences is written once and read back shared; a one-sequence
 * stream carries only its own rows. page_rows must match the reading memory's.
 */
size_t rmem_kv_state_size(const struct rmem_kv *kv, int32_t seq);
/* Writes every sequence (seq = -1) or one. False with the error set when the writer fails or
 * seq is out of range. */
bool rmem_kv_state_write(const struct rmem_kv *kv, struct rio_writer *w, int32_t seq);
/* Reads a stream of rmem_kv_state_write. seq = -1: replaces every sequence; seq >= 0: a
 * one-sequence stream into seq (its former tokens dropped, others untouched). A stream that is
 * truncated, corrupt, made for another shape or that does not fit the free pages is refused
 * with the error saying what and where, and the memory is left as it was. */
bool rmem_kv_state_read(struct rmem_kv *kv, struct rio_reader *r, int32_t seq);

/* A one-sequence stream of seq's first n tokens (n <= its count), as rmem_kv_state_write
 * writes one of a sequence holding only those: the prefix cache's entries of a hybrid
 * sequence's earlier positions. False with the error set when n or seq is out of range or the
 * writer fails; the size function returns 0 then. */
bool rmem_kv_state_write_prefix(const struct rmem_kv *kv, struct rio_writer *w, int32_t seq,
                                uint32_t n);
size_t rmem_kv_state_size_prefix(const struct rmem_kv *kv, int32_t seq, uint32_t n);
/* rmem_kv_state_read of a one-sequence stream (seq >= 0) whose last token must be at position
 * last_pos (-1: it holds none; INT32_MIN: any), checked before anything changes. */
bool rmem_kv_state_read_ending(struct rmem_kv *kv, struct rio_reader *r, int32_t seq,
                               int32_t last_pos);
/* The same, but the stream's rows may go on past last_pos: the tokens after it are left out (a
 * prefix cache entry restored from the rows of a longer one that begins with it). */
bool rmem_kv_state_read_upto(struct rmem_kv *kv, struct rio_reader *r, int32_t seq,
                             int32_t last_pos);

/* XXH64 over the page counts, every sequence's table, positions and rows. */
uint64_t rmem_kv_fingerprint(const struct rmem_kv *kv);
/* Verifies every invariant (reference counts, the free list, positions in order); false with
 * the error naming the broken one. */
bool rmem_kv_check(const struct rmem_kv *kv);

#endif /* RECUR_MEMORY_H */
