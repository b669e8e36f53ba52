/* The JSON-schema converter's shared state and helpers: schema.c holds the walk, the shared
 * primitive rules and the combinators; schema_obj.c the rules of objects and arrays,
 * schema_scalar.c those of strings and integers, schema_regex.c the "pattern" regex. Every function
 * that fails sets the converter's error once (sc_fail) and returns NULL / false; an allocation
 * failure sets c->oom, which sc_visit turns into the error. */
#ifndef RECUR_GRAMMAR_SCHEMA_IMPL_H
#define RECUR_GRAMMAR_SCHEMA_IMPL_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "../core/buf.h"
#include "../core/core.h"

struct rule {
    char *name, *body;
};

struct conv {
    const cJSON *doc;
    struct rule *rules;
    size_t n_rules, cap_rules;
    struct {
        char *ref, *name;
    } * refs;
    size_t n_refs, cap_refs;
    bool failed, oom;
    int depth;
};

#define MAX_DEPTH 64

/* The first failure: "json schema: at 'PATH': MSG" as the error; false. */
bool sc_fail(struct conv *c, const char *path, const char *fmt, ...) RCORE_PRINTF(3, 4);
/* A rule with a fixed name and body, once (the shared primitives); its name. */
const char *sc_prim(struct conv *c, const char *name, const char *body);
/* A new rule named after hint (made unique) with body b (consumed); its name. */
const char *sc_make(struct conv *c, const char *hint, struct rcore_buf *b);
/* The shared primitives, defined on first use; their names. */
const char *sc_space(struct conv *c);
const char *sc_char(struct conv *c);
const char *sc_string(struct conv *c);
const char *sc_integer(struct conv *c);
const char *sc_int_part(struct conv *c); /* digits of an integer, 16 at most */
const char *sc_number(struct conv *c);
const char *sc_value(struct conv *c);
/* The JSON text of v as a GBNF literal, into b. */
bool sc_json_lit(struct conv *c, struct rcore_buf *b, const cJSON *v);
/* The rule of schema s at JSON path `path`, its name made from hint. */
const char *sc_visit(struct conv *c, const cJSON *s, const char *path, const char *hint);
/* Every key of s is an annotation or in allowed (NULL-terminated); else the error names it,
   "with WHAT" when what is not NULL. */
bool sc_check_keys(struct conv *c, const cJSON *s, const char *path, const char *const *allowed,
                   const char *what);
/* k never changes which values are valid (title, description, ...). */
bool sc_is_annotation(const char *k);
/* s[key] as a count from 0 to 100000 into *out (left alone when absent). */
bool sc_get_count(struct conv *c, const cJSON *s, const char *key, const char *path, long *out);
/* item{min,max} joined by sep, into b (max < 0: unbounded) */
void sc_repeat_sep(struct rcore_buf *b, const char *item, const char *sep, long min, long max);
/* path + "/" + a (+ "/" + b) */
void sc_subpath(char *out, size_t cap, const char *path, const char *a, const char *b);

/* schema_obj.c, schema_scalar.c: the rules of one "type" (keywords checked there) */
const char *sc_object_rule(struct conv *c, const cJSON *s, const char *path, const char *hint);
const char *sc_array_rule(struct conv *c, const cJSON *s, const char *path, const char *hint);
const char *sc_string_rule(struct conv *c, const cJSON *s, const char *path, const char *hint);
const char *sc_integer_rule(struct conv *c, const cJSON *s, const char *path, const char *hint);
const char *sc_number_rule(struct conv *c, const cJSON *s, const char *path, const char *hint);

#endif
