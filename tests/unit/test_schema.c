/*
 * JSON schema -> GBNF (src/grammar/schema*.c, recur_json_schema_to_grammar): documents each
 * schema's grammar must accept and must reject, integer ranges against plain comparisons, and
 * every unsupported construct refused with the keyword and its path named.
 *
 *   test_schema DATA_DIR
 */
#include <stdint.h>

#include "recur.h"

#include "core/core.h"
#include "grammar/grammar.h"

#include "file_util.h"
#include "grammar_util.h"
#include "test.h"

static const char *data_dir;

static int schema_match(const char *schema, const char *json) {
    char *gt = recur_json_schema_to_grammar(schema);
    if (!gt) {
        fprintf(stderr, "schema failed: %s\n", recur_last_error());
        return -2;
    }
    int r = match(gt, json);
    free(gt);
    return r;
}

static void test_schema(void) {
    static const struct {
        const char *schema, *json;
        int want;
    } cases[] = {
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":"
         "\"string\"}},\"required\":[\"a\"],\"additionalProperties\":false}",
         "{\"a\": 1}", 1},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":"
         "\"string\"}},\"required\":[\"a\"],\"additionalProperties\":false}",
         "{\"a\": -12, \"b\": \"x\"}", 1},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":"
         "\"string\"}},\"required\":[\"a\"],\"additionalProperties\":false}",
         "{\"b\": \"x\"}", -1},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":"
         "\"string\"}},\"required\":[\"a\"],\"additionalProperties\":false}",
         "{\"a\": 1, \"c\": 2}", -1},
        {"{\"type\":\"object\",\"properties\":{\"a\":{},\"b\":{},\"c\":{}}}", "{\"c\": 1}", 1},
        {"{\"type\":\"object\",\"properties\":{\"a\":{},\"b\":{},\"c\":{}}}",
         "{\"a\": [], \"c\": {\"z\": null}}", 1},
        {"{\"type\":\"object\",\"properties\":{\"a\":{},\"b\":{},\"c\":{}}}", "{}", 1},
        {"{\"type\":\"object\",\"additionalProperties\":{\"type\":\"boolean\"}}",
         "{\"x\": true, \"y\": false}", 1},
        {"{\"type\":\"object\",\"additionalProperties\":{\"type\":\"boolean\"}}", "{\"x\": 1}", -1},
        {"{\"enum\":[\"red\",1,null]}", "\"red\"", 1},
        {"{\"enum\":[\"red\",1,null]}", "null", 1},
        {"{\"enum\":[\"red\",1,null]}", "\"blue\"", -1},
        {"{\"const\":{\"k\":[1,\"\\\"\"]}}", "{\"k\":[1,\"\\\"\"]}", 1},
        {"{\"type\":\"array\",\"items\":{\"type\":\"boolean\"},\"minItems\":2,\"maxItems\":3}",
         "[true]", -1},
        {"{\"type\":\"array\",\"items\":{\"type\":\"boolean\"},\"minItems\":2,\"maxItems\":3}",
         "[true, false, true]", 1},
        {"{\"type\":\"array\",\"items\":{\"type\":\"boolean\"},\"minItems\":2,\"maxItems\":3}",
         "[true, false, true, true]", -1},
        {"{\"type\":\"array\",\"maxItems\":0}", "[]", 1},
        {"{\"type\":\"array\"}", "[1, \"a\", [{}]]", 1},
        {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", "\"ab\"", 1},
        {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", "\"a\"", -1},
        {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", "\"abcd\"", -1},
        {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", "\"a\\n\"", 1},
        {"{\"type\":\"string\",\"pattern\":\"^[a-z]+-\\\\d{2}$\"}", "\"ab-12\"", 1},
        {"{\"type\":\"string\",\"pattern\":\"^[a-z]+-\\\\d{2}$\"}", "\"ab-1\"", -1},
        {"{\"type\":\"string\",\"pattern\":\"^(ab|c)*x?\\\\.$\"}", "\"abcab.\"", 1},
        {"{\"type\":\"string\",\"pattern\":\"^(ab|c)*x?\\\\.$\"}", "\"acb.\"", -1},
        {"{\"type\":\"string\",\"pattern\":\"^a.b$\"}", "\"a\\\"b\"", 1},
        {"{\"type\":\"string\",\"pattern\":\"^a.b$\"}", "\"a\\nb\"", -1},
        {"{\"type\":\"string\",\"pattern\":\"^[^a]\\\\s$\"}", "\"\\\\\\t\"", 1},
        {"{\"type\":\"string\",\"pattern\":\"^[]a]+$\"}", "\"]a]\"", 1},
        /* a class longer than any fixed buffer */
        {"{\"type\":\"string\",\"pattern\":\"^["
         "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0"
         "123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!]+$\"}",
         "\"Zz9!\"", 1},
        {"{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}", "42", 1},
        {"{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}", "4.5", -1},
        {"{\"oneOf\":[{\"type\":\"null\"},{\"type\":\"boolean\"}]}", "false", 1},
        {"{\"type\":[\"string\",\"null\"]}", "null", 1},
        {"{\"type\":\"number\"}", "-1.5e3", 1},
        {"{\"type\":\"number\"}", "01", -1},
        {"{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"kids\":{\"type\":\"array\","
         "\"items\":{\"$ref\":\"#/$defs/node\"}}},\"additionalProperties\":false}},"
         "\"$ref\":\"#/$defs/node\"}",
         "{\"kids\": [{\"kids\": []}, {}]}", 1},
        {"{\"definitions\":{\"x\":{\"type\":\"integer\"}},\"type\":\"object\",\"properties\":{"
         "\"v\":{\"$ref\":\"#/definitions/x\"}},\"required\":[\"v\"]}",
         "{\"v\": 3}", 1},
        {"{\"allOf\":[{\"type\":\"integer\",\"minimum\":10}]}", "-3", -1},
        {"{\"allOf\":[{\"type\":\"integer\",\"minimum\":10}]}", "10", 1},
        {"true", "[{\"a\": null}]", 1},
        {"{\"title\":\"x\",\"description\":\"y\"}", "\"s\"", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int r = schema_match(cases[i].schema, cases[i].json);
        CHECK_MSG(r == cases[i].want, "case %zu: %d, want %d", i, r, cases[i].want);
    }
}

/* Integer bounds: every value near and inside the range, against plain comparisons. */
static void test_schema_integers(void) {
    static const long long ranges[][2] = {
        {0, 9},     {1, 1},  {7, 123}, {-5, 5},    {-130, -17}, {0, 1000},
        {99, 1001}, {-1, 0}, {10, 10}, {-999, 99}, {250, 7000}, {-7, -7},
    };
    char schema[256], text[32];
    for (size_t r = 0; r < sizeof ranges / sizeof ranges[0]; r++) {
        const long long lo = ranges[r][0], hi = ranges[r][1];
        snprintf(schema, sizeof schema, "{\"type\":\"integer\",\"minimum\":%lld,\"maximum\":%lld}",
                 lo, hi);
        char *gt = recur_json_schema_to_grammar(schema);
        REQUIRE(gt);
        struct rgram *g = rgram_parse(gt, strlen(gt), "root");
        REQUIRE(g);
        int wrong = 0;
        for (long long v = lo - 120; v <= hi + 120; v++) {
            int k = snprintf(text, sizeof text, "%lld", v);
            if ((match_g(g, text, (size_t)k) == 1) != (v >= lo && v <= hi)) wrong++;
        }
        CHECK_MSG(wrong == 0, "[%lld, %lld]: %d values wrong", lo, hi, wrong);
        rgram_free(g);
        free(gt);
    }
    /* one-sided and exclusive bounds */
    static const struct {
        const char *schema;
        long long lo, hi; /* LLONG_MIN / LLONG_MAX: none */
    } one[] = {
        {"{\"type\":\"integer\",\"minimum\":42}", 42, INT64_MAX},
        {"{\"type\":\"integer\",\"minimum\":-42}", -42, INT64_MAX},
        {"{\"type\":\"integer\",\"maximum\":17}", INT64_MIN, 17},
        {"{\"type\":\"integer\",\"maximum\":-17}", INT64_MIN, -17},
        {"{\"type\":\"integer\",\"exclusiveMinimum\":3,\"exclusiveMaximum\":9}", 4, 8},
    };
    for (size_t r = 0; r < sizeof one / sizeof one[0]; r++) {
        char *gt = recur_json_schema_to_grammar(one[r].schema);
        REQUIRE(gt);
        struct rgram *g = rgram_parse(gt, strlen(gt), "root");
        REQUIRE(g);
        int wrong = 0;
        for (long long v = -1200; v <= 1200; v++) {
            int k = snprintf(text, sizeof text, "%lld", v);
            if ((match_g(g, text, (size_t)k) == 1) != (v >= one[r].lo && v <= one[r].hi)) wrong++;
        }
        CHECK_MSG(wrong == 0, "%s: %d values wrong", one[r].schema, wrong);
        rgram_free(g);
        free(gt);
    }
}

static void test_schema_errors(void) {
    static const struct {
        const char *schema, *error;
    } cases[] = {
        {"{\"type\":\"object\",\"foo\":1}", "at '/': keyword 'foo' is not supported"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"format\":\"email\"}}}",
         "at '/properties/a': 'format' 'email' is not supported"},
        {"{\"not\":{}}", "keyword 'not' is not supported"},
        {"{\"type\":\"number\",\"minimum\":0}",
         "keyword 'minimum' is not supported with type number"},
        {"{\"$ref\":\"http://example.com/s\"}", "'$ref' must be"},
        {"{\"$ref\":\"#/$defs/nope\"}", "points at nothing"},
        {"{\"type\":\"strin\"}", "unknown type 'strin'"},
        {"{", "not valid JSON"},
        {"[1]", "a schema must be an object or true"},
        {"{\"type\":\"array\",\"minItems\":3,\"maxItems\":1}", "maxItems is below minItems"},
        {"{\"type\":\"array\",\"minItems\":-1}", "'minItems' must be a whole number"},
        {"{\"type\":\"string\",\"pattern\":\"abc\"}", "must start with '^'"},
        {"{\"type\":\"string\",\"pattern\":\"^(?=a)$\"}", "lookarounds"},
        {"{\"type\":\"string\",\"pattern\":\"^a\\\\1$\"}", "unsupported escape"},
        {"{\"type\":\"string\",\"pattern\":\"^a{2,1}$\"}", "bad repetition"},
        {"{\"type\":\"string\",\"pattern\":\"^a$b$\"}", "only at the pattern's ends"},
        {"{\"type\":\"string\",\"pattern\":\"^[\\\"]$\"}", "a class containing"},
        {"{\"type\":\"string\",\"pattern\":\"^a$\",\"maxLength\":3}", "together with"},
        {"{\"allOf\":[{},{}]}", "'allOf' is supported with exactly one schema"},
        {"{\"anyOf\":[]}", "'anyOf' must be a non-empty array"},
        {"{\"anyOf\":[{}],\"type\":\"string\"}", "keyword 'type' is not supported with anyOf"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"additionalProperties\":true}",
         "'additionalProperties' other than false"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"required\":[\"b\"]}",
         "'required' names"},
        {"{\"type\":\"integer\",\"minimum\":5,\"maximum\":1}", "no integer lies between"},
        {"{\"type\":\"integer\",\"minimum\":1e20}", "within +-2^53"},
        {"{\"minimum\":1}", "'minimum' without \"type\": \"integer\""},
        {"{\"type\":[\"string\",3]}", "'type' lists a non-string"},
        {"{\"type\":\"object\",\"prefixItems\":[]}", "keyword 'prefixItems' is not supported"},
        {"{\"uniqueItems\":true}", "keyword 'uniqueItems' is not supported"},
        {"{\"enum\":[\"x\xAA\"]}", "invalid UTF-8 at byte 11"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *g = recur_json_schema_to_grammar(cases[i].schema);
        CHECK_MSG(g == NULL, "case %zu converted", i);
        free(g);
        CHECK_MSG(strstr(recur_last_error(), cases[i].error) != NULL,
                  "case %zu: \"%s\", not \"%s\"", i, recur_last_error(), cases[i].error);
    }
    /* a $ref cycle with nothing in between converts, and the grammar is refused, not run */
    char *g = recur_json_schema_to_grammar(
        "{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/a\"}},\"$ref\":\"#/$defs/a\"}");
    REQUIRE(g);
    CHECK(rgram_parse(g, strlen(g), "root") == NULL);
    CHECK_ERR("left recursion");
    free(g);
    /* deep nesting: an error, not a stack overflow */
    char deep[8000];
    size_t k = 0;
    for (int i = 0; i < 500; i++) k += (size_t)snprintf(deep + k, sizeof deep - k, "{\"items\":");
    k += (size_t)snprintf(deep + k, sizeof deep - k, "{}");
    for (int i = 0; i < 500; i++) deep[k++] = '}';
    deep[k] = 0;
    g = recur_json_schema_to_grammar(deep);
    CHECK(g == NULL);
    CHECK(strstr(recur_last_error(), "nested too deeply") != NULL);
    free(g);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_schema DATA_DIR\n");
        return 2;
    }
    data_dir = argv[1];
    RUN(test_schema);
    RUN(test_schema_integers);
    RUN(test_schema_errors);
    return test_finish("test_schema");
}
