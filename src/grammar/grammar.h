/*
 * grammar: GBNF grammars (llama.cpp's syntax) that constrain sampling to the texts they accept.
 *
 * Data structures
 *  - A grammar (struct rgram) is a flat array of elements. Each rule is a run of alternatives,
 *    each alternative a run of symbols ended by ALT, the rule ended by END. A symbol is a
 *    character set (SET: an index into the grammar's set table; a set is a sorted list of
 *    code-point ranges, maybe negated) or a reference to a rule (REF). The parser turns
 *    strings into one SET per character, groups into generated rules, and repetitions into
 *    generated right-recursive rules (x* -> R ::= x R | ; x{m,n} -> m copies of x, then n-m
 *    nested optional copies), so the matcher knows only sequences, alternatives and
 *    references. Left recursion is refused at parse time (it would make expansion endless).
 *  - A position in the grammar is a stack of element indices: the top is the next symbol to
 *    match, the ones below are where to resume when the rule on top ends. Stacks are
 *    persistent linked lists in an arena of nodes {element, parent node}: pushing allocates
 *    one node, popping is following the parent, and two stacks share their common bottoms,
 *    so advancing never copies a stack. The empty stack (node -1) means "the root rule is
 *    complete". Stacks are kept expanded: their top is always a SET (or the empty stack).
 *  - A matcher state (struct rgram_state) is a set of such stacks (the grammar may be
 *    ambiguous, so several parses run side by side) plus a partial UTF-8 sequence: the
 *    grammar is over code points, tokens are bytes, and a token may end inside a character.
 *  - The vocabulary trie (struct rgram_trie) holds every token's bytes as a prefix tree laid
 *    out in depth-first order: node i's subtree is i+1 .. end[i), so skipping a subtree is one
 *    jump. The tokens whose bytes end at a node are a range of an id array sorted by bytes.
 *  - The mask (rgram_mask) walks the trie once from the current state, advancing the stacks
 *    byte by byte down each branch and dropping a whole subtree as soon as no stack survives
 *    its prefix; every token whose node is reached with a live state is allowed. The cost
 *    follows the part of the trie the grammar allows, not the vocabulary's size times the
 *    token length, and shared prefixes are advanced once. rgram_mask_naive checks each token
 *    on its own (llama.cpp's approach), for tests and the benchmark.
 *  - Caches, all in the state: stacks and sets of stacks are interned (hash tables), so each
 *    set has an id and its transitions by ASCII bytes are a table (other code points: a hash
 *    map), filled on first use: the matcher becomes a lazily built automaton. A set's "loop
 *    mask" (the ASCII bytes that lead back to it) lets the walk allow a whole trie subtree at
 *    once when every byte below it loops (the inside of a string). The masks of the last
 *    RGRAM_MASK_CACHE states are kept. Past fixed sizes the caches are dropped and rebuilt
 *    from the current set (rgram_state_collect), so memory stays bounded.
 *
 * Limits, so that no grammar hangs or exhausts memory: a grammar has at most 1 << 20
 * elements; from any position, an expansion (the stacks reached before the next character)
 * visits at most RGRAM_MAX_EXPANSION stacks, counting every way to each, and nests at most
 * RGRAM_MAX_EXPANSION_DEPTH rules (checked at parse time: a repetition of something that can
 * match the empty text, (x?){0,1000}, is refused there); a state holds at most RGRAM_MAX_STACKS
 * stacks; one step (an accept, a mask, a reset) looks at most at RGRAM_MAX_STEP_WORK stacks,
 * and an expansion recurses at most RGRAM_MAX_DEPTH deep. Past any of them the call fails
 * with an error naming the limit (and, at parse time, the rule).
 *
 * Errors set the thread's error (rcore_error_set): parse errors read "line L, column C:
 * message" (both from 1, columns in code points). Nothing here is thread-safe per object;
 * different objects may be used by different threads (a grammar is read-only once parsed and
 * may be shared).
 */
#ifndef RECUR_GRAMMAR_H
#define RECUR_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RGRAM_MAX_STACKS          1024
#define RGRAM_MAX_EXPANSION       1024
#define RGRAM_MAX_EXPANSION_DEPTH 1024
#define RGRAM_MAX_DEPTH           4096
#define RGRAM_MAX_STEP_WORK       (1u << 20)

struct rgram;
struct rgram_state;
struct rgram_trie;

/* Parses GBNF text (len bytes) with root rule `root` (NULL: "root"). NULL with the error set
 * ("line L, column C: ...") on a syntax error, an undefined rule, a rule defined twice, left
 * recursion, a missing root, or a grammar over the size or expansion limits. */
struct rgram *rgram_parse(const char *text, size_t len, const char *root);
void rgram_free(struct rgram *g); /* NULL is fine */
size_t rgram_n_rules(const struct rgram *g);

/* A matcher at the start of g (g must outlive it). NULL on allocation failure or too many
 * stacks. */
struct rgram_state *rgram_state_new(const struct rgram *g);
void rgram_state_free(struct rgram_state *s);
/* Back to the start. */
bool rgram_state_reset(struct rgram_state *s);
/* Advances by bytes; false (state unchanged, error set) when the grammar rejects them or a
 * limit is hit. */
bool rgram_state_accept(struct rgram_state *s, const char *bytes, size_t len);
/* The root rule is complete here (end of generation may follow); false inside a character. */
bool rgram_state_complete(const struct rgram_state *s);
/* Some text may still follow: false when only the end may, or when every way on needs a
 * character that no set holds (an empty class "[]"). */
bool rgram_state_can_continue(const struct rgram_state *s);

/* Token bytes: n tokens, token i's bytes at bytes + off[i], off[i+1] - off[i] long. Tokens of
 * zero length are never allowed. NULL on allocation failure. */
struct rgram_trie *rgram_trie_new(int32_t n, const char *bytes, const size_t *off);
void rgram_trie_free(struct rgram_trie *t);
size_t rgram_trie_n_nodes(const struct rgram_trie *t);

/* Sets allowed[i] to 1 for each token i that the state can accept next (whole or as the start
 * of a character), 0 otherwise (allowed has the trie's n entries). Returns the number allowed,
 * -1 with the error set on allocation failure or too many stacks. */
int64_t rgram_mask(struct rgram_state *s, const struct rgram_trie *t, uint8_t *allowed);
/* The same without the state's cache of recent masks (the last RGRAM_MASK_CACHE states'
 * masks are kept, per trie content: a state that comes back costs a copy). */
int64_t rgram_mask_walk(struct rgram_state *s, const struct rgram_trie *t, uint8_t *allowed);
/* The same, checking each token separately. */
int64_t rgram_mask_naive(struct rgram_state *s, const struct rgram_trie *t, uint8_t *allowed);

/* ---- JSON schema (schema.c, schema_regex.c) ---------------------------------------- */

/* A GBNF grammar (malloc'd, NUL-terminated, root rule "root") accepting the JSON texts that
 * the schema (len bytes of JSON) describes. NULL with the error set naming the construct and
 * its JSON pointer when the schema is not JSON or uses a keyword outside the supported
 * subset (see schema.c). */
char *rgram_json_schema(const char *schema, size_t len);

#endif /* RECUR_GRAMMAR_H */
