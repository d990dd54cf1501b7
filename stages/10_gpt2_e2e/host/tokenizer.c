/**
 * @file stages/10_gpt2_e2e/host/tokenizer.c
 * @brief GPT-2's byte-level BPE (see tokenizer.h): the byte map, two hash
 *        tables (token bytes → id, pair → merge rank), the pre-tokenizer and the
 *        merge loop.
 */
#include "tokenizer.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/** Open-addressing hash table from byte strings to ints. */
typedef struct {
    char **keys;   /**< [cap] owned copies, NULL where empty */
    int *key_len;  /**< [cap] */
    int *values;   /**< [cap] */
    size_t cap;    /**< a power of two */
    size_t n;      /**< keys stored */
} table;

static uint64_t hash_bytes(const char *p, int n)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (int i = 0; i < n; ++i) h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
    return h;
}

static int table_init(table *t, size_t expected)
{
    t->cap = 16;
    while (t->cap < 2 * expected + 16) t->cap *= 2;
    t->n = 0;
    t->keys = calloc(t->cap, sizeof(char *));
    t->key_len = calloc(t->cap, sizeof(int));
    t->values = calloc(t->cap, sizeof(int));
    return t->keys && t->key_len && t->values ? 0 : -1;
}

static void table_free(table *t)
{
    for (size_t i = 0; t->keys && i < t->cap; ++i) free(t->keys[i]);
    free(t->keys), free(t->key_len), free(t->values);
    memset(t, 0, sizeof *t);
}

/** The slot of key, or of the empty place where it would go. */
static size_t table_slot(const table *t, const char *k, int n)
{
    size_t i = (size_t)hash_bytes(k, n) & (t->cap - 1);
    while (t->keys[i] && !(t->key_len[i] == n && memcmp(t->keys[i], k, (size_t)n) == 0)) i = (i + 1) & (t->cap - 1);
    return i;
}

static int table_get(const table *t, const char *k, int n, int *value)
{
    size_t i = table_slot(t, k, n);
    if (!t->keys[i]) return 0;
    *value = t->values[i];
    return 1;
}

/** Insert (keeping the first value of a repeated key). Grows when half full. */
static int table_put(table *t, const char *k, int n, int value)
{
    if (2 * (t->n + 1) > t->cap) {
        table bigger;
        if (table_init(&bigger, t->cap)) return -1;
        for (size_t i = 0; i < t->cap; ++i)
            if (t->keys[i]) {
                size_t j = table_slot(&bigger, t->keys[i], t->key_len[i]);
                bigger.keys[j] = t->keys[i], bigger.key_len[j] = t->key_len[i], bigger.values[j] = t->values[i];
                bigger.n++;
                t->keys[i] = NULL;
            }
        table_free(t);
        *t = bigger;
    }
    size_t i = table_slot(t, k, n);
    if (t->keys[i]) return 0;
    t->keys[i] = malloc((size_t)n + 1);
    if (!t->keys[i]) return -1;
    memcpy(t->keys[i], k, (size_t)n);
    t->key_len[i] = n, t->values[i] = value, t->n++;
    return 0;
}

enum {
    MAX_TOKEN_ID = (1 << 20) - 1, /* GPT-2's largest is 50256; a bigger id is a broken file, not a 12 MB table */
    MAX_MERGE_PART = 512          /* bytes of one side of a merge (GPT-2's longest token is 128) */
};

/** @brief The tokenizer's state (opaque to callers). */
struct gpt2_tokenizer {
    int n_ids;        /**< largest id + 1 */
    char **bytes;     /**< [n_ids] each token's bytes (NULL: an unused id) */
    int *len;         /**< [n_ids] */
    table vocab;      /**< bytes → id */
    table merges;     /**< [len(a) as 2 bytes][a][b] → rank */
    int byte_of[324]; /**< GPT-2's character → byte map, by code point (−1: not in the map) */
};

/** GPT-2's bytes_to_unicode(): printable Latin-1 bytes stand for themselves, the other 68 for 256, 257, … */
static void make_byte_map(int *byte_of)
{
    for (int c = 0; c < 324; ++c) byte_of[c] = -1;
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        byte_of[printable ? b : 256 + extra++] = b;
    }
}

static void set_err(char *err, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
}

static char *read_file(const char *path, size_t *size, char *err, size_t err_len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return set_err(err, err_len, "cannot open '%s'", path), NULL;
    char *buf = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0) n = ftell(f);
    if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1)) && fread(buf, 1, (size_t)n, f) == (size_t)n) {
        buf[n] = '\0';
        *size = (size_t)n;
    } else {
        free(buf), buf = NULL;
        set_err(err, err_len, "cannot read '%s'", path);
    }
    fclose(f);
    return buf;
}

/**
 * The UTF-8 character at s (n > 0 bytes left): its code point in *cp and its
 * length, or 0 when it is not UTF-8 (a bad lead or continuation byte, cut short,
 * an overlong form, a UTF-16 surrogate, past U+10FFFF).
 */
static size_t utf8_next(const unsigned char *s, size_t n, unsigned *cp)
{
    unsigned c = s[0];
    size_t extra = c < 0x80 ? 0 : (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2 : (c & 0xF8) == 0xF0 ? 3 : 4;
    if (extra == 4 || extra >= n) return 0;
    *cp = extra == 0 ? c : c & (0x3F >> extra);
    for (size_t e = 1; e <= extra; ++e) {
        if ((s[e] & 0xC0) != 0x80) return 0;
        *cp = *cp << 6 | (s[e] & 0x3F);
    }
    static const unsigned least[4] = {0, 0x80, 0x800, 0x10000};
    if (*cp < least[extra] || (*cp >= 0xD800 && *cp <= 0xDFFF) || *cp > 0x10FFFF) return 0;
    return extra + 1;
}

/** GPT-2 characters (UTF-8) → bytes, in place; −1 for a character outside the map. */
static int chars_to_bytes(const gpt2_tokenizer *t, const char *s, int n, char *out)
{
    int k = 0;
    for (int i = 0; i < n;) {
        unsigned cp;
        size_t len = utf8_next((const unsigned char *)s + i, (size_t)(n - i), &cp);
        if (!len || cp >= 324 || t->byte_of[cp] < 0) return -1;
        i += (int)len;
        out[k++] = (char)t->byte_of[cp];
    }
    return k;
}

/** A JSON string at *p (escapes decoded to UTF-8) into out; returns its length or −1. */
static int json_string(const char **p, const char *end, char *out, int cap)
{
    const char *s = *p;
    if (s >= end || *s != '"') return -1;
    int n = 0;
    for (++s; s < end && *s != '"'; ++s) {
        unsigned cp = (unsigned char)*s;
        if (*s == '\\') {
            if (++s >= end) return -1;
            switch (*s) {
            case 'n': cp = '\n'; break;
            case 't': cp = '\t'; break;
            case 'r': cp = '\r'; break;
            case 'b': cp = '\b'; break;
            case 'f': cp = '\f'; break;
            case 'u':
                if (end - s < 5) return -1;
                cp = 0;
                for (int i = 1; i <= 4; ++i) {
                    char c = s[i];
                    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
                    if (d < 0) return -1;
                    cp = cp * 16 + (unsigned)d;
                }
                s += 4;
                break;
            case '"': case '\\': case '/': cp = (unsigned char)*s; break;
            default: return -1; /* JSON has no other escapes */
            }
            if (n + 3 >= cap) return -1;
            if (cp < 0x80) out[n++] = (char)cp;
            else if (cp < 0x800) out[n++] = (char)(0xC0 | cp >> 6), out[n++] = (char)(0x80 | (cp & 63));
            else out[n++] = (char)(0xE0 | cp >> 12), out[n++] = (char)(0x80 | (cp >> 6 & 63)), out[n++] = (char)(0x80 | (cp & 63));
        } else {
            if (n + 1 >= cap) return -1;
            out[n++] = *s;
        }
    }
    if (s >= end) return -1;
    *p = s + 1;
    return n;
}

static void skip_ws(const char **p, const char *end)
{
    while (*p < end && (**p == ' ' || **p == '\n' || **p == '\r' || **p == '\t')) ++*p;
}

/** Parse vocab.json's `size` bytes at `text`; `path` names it in messages. */
static int parse_vocab(gpt2_tokenizer *t, const char *path, const char *text, size_t size, char *err, size_t err_len)
{
    const char *p = text, *end = text + size;
    int rc = -1, cap = 1024;
    char key[1024], raw[1024];
    t->bytes = calloc((size_t)cap, sizeof(char *));
    t->len = calloc((size_t)cap, sizeof(int));
    if (!t->bytes || !t->len || table_init(&t->vocab, 60000)) goto done;
    skip_ws(&p, end);
    if (p >= end) { set_err(err, err_len, "%s: the file is empty", path); goto done; }
    if (*p++ != '{') { set_err(err, err_len, "%s: expected a JSON object ({\"token\": id, ...})", path); goto done; }
    for (;;) {
        skip_ws(&p, end);
        if (p < end && *p == '}') break;
        const char *at = p;
        int n = json_string(&p, end, raw, sizeof raw);
        skip_ws(&p, end);
        if (n < 0) { set_err(err, err_len, "%s: bad token string at byte %ld (unterminated, a bad escape, or over %d bytes)", path, (long)(at - text), (int)sizeof raw - 4); goto done; }
        if (p >= end || *p++ != ':') { set_err(err, err_len, "%s: expected ':' after the token at byte %ld", path, (long)(at - text)); goto done; }
        skip_ws(&p, end);
        long id = 0;
        int digits = 0;
        while (p < end && *p >= '0' && *p <= '9' && id <= MAX_TOKEN_ID) id = id * 10 + (*p++ - '0'), digits++;
        if (!digits || id > MAX_TOKEN_ID) { set_err(err, err_len, "%s: bad id at byte %ld (ids are integers 0..%d)", path, (long)(p - text), MAX_TOKEN_ID); goto done; }
        int k = chars_to_bytes(t, raw, n, key);
        if (k <= 0) { set_err(err, err_len, "%s: token at byte %ld has a character outside GPT-2's byte map", path, (long)(at - text)); goto done; }
        while (id >= cap) {
            int more = cap * 2;
            char **b = realloc(t->bytes, (size_t)more * sizeof(char *));
            if (b) t->bytes = b;
            int *l = realloc(t->len, (size_t)more * sizeof(int));
            if (l) t->len = l;
            if (!b || !l) goto done;
            memset(t->bytes + cap, 0, (size_t)(more - cap) * sizeof(char *));
            memset(t->len + cap, 0, (size_t)(more - cap) * sizeof(int));
            cap = more;
        }
        if (t->bytes[id]) { set_err(err, err_len, "%s: id %ld appears twice", path, id); goto done; }
        t->bytes[id] = malloc((size_t)k);
        if (!t->bytes[id]) goto done;
        memcpy(t->bytes[id], key, (size_t)k);
        t->len[id] = k;
        if ((int)id >= t->n_ids) t->n_ids = (int)id + 1;
        if (table_put(&t->vocab, key, k, (int)id)) goto done;
        skip_ws(&p, end);
        if (p < end && *p == ',') { ++p; continue; }
        if (p < end && *p == '}') break;
        set_err(err, err_len, "%s: expected ',' or '}' at byte %ld", path, (long)(p - text));
        goto done;
    }
    ++p; /* the '}' */
    skip_ws(&p, end);
    if (p < end) { set_err(err, err_len, "%s: unexpected text after the object at byte %ld", path, (long)(p - text)); goto done; }
    for (int byte = 0; byte < 256; ++byte) { /* byte-level BPE: every input must encode */
        int id;
        char one = (char)byte;
        if (!table_get(&t->vocab, &one, 1, &id)) {
            set_err(err, err_len, "%s: no token for the byte 0x%02x (a byte-level vocabulary has all 256)", path, byte);
            goto done;
        }
    }
    rc = 0;
done:
    if (rc && !err[0]) set_err(err, err_len, "%s: out of memory", path);
    return rc;
}

/** Parse merges.txt's `size` bytes at `text` (cut into lines in place: text[size] must exist). */
static int parse_merges(gpt2_tokenizer *t, const char *path, char *text, size_t size, char *err, size_t err_len)
{
    int rc = -1, rank = 0, line_no = 0;
    if (table_init(&t->merges, 60000)) goto done;
    for (char *line = text; line < text + size;) {
        char *nl = memchr(line, '\n', (size_t)(text + size - line));
        char *eol = nl ? nl : text + size;
        line_no++;
        if (eol > line && eol[-1] == '\r') eol[-1] = '\0', eol--;
        *eol = '\0';
        if (line < eol && !(line_no == 1 && strncmp(line, "#version", 8) == 0)) {
            char *sp = strchr(line, ' ');
            char a[MAX_MERGE_PART], b[MAX_MERGE_PART], key[2 + 2 * MAX_MERGE_PART];
            int na, nb, id;
            /* a part's bytes are at most its characters: check the length before converting into a[] / b[] */
            if (!sp || sp == line || sp + 1 >= eol || strchr(sp + 1, ' ') || sp - line > MAX_MERGE_PART ||
                eol - sp - 1 > MAX_MERGE_PART || (na = chars_to_bytes(t, line, (int)(sp - line), a)) <= 0 ||
                (nb = chars_to_bytes(t, sp + 1, (int)(eol - sp - 1), b)) <= 0) {
                set_err(err, err_len, "%s:%d: expected two tokens (GPT-2 characters, at most %d each) separated by one space",
                        path, line_no, MAX_MERGE_PART);
                goto done;
            }
            /* a merge joins two tokens of the vocabulary into a third */
            memcpy(key, a, (size_t)na), memcpy(key + na, b, (size_t)nb);
            const char *missing = !table_get(&t->vocab, a, na, &id) ? "first token"
                                  : !table_get(&t->vocab, b, nb, &id) ? "second token"
                                  : !table_get(&t->vocab, key, na + nb, &id) ? "merged token" : NULL;
            if (missing) {
                set_err(err, err_len, "%s:%d: the merge's %s is not in the vocabulary", path, line_no, missing);
                goto done;
            }
            key[0] = (char)(na & 255), key[1] = (char)(na >> 8);
            memcpy(key + 2, a, (size_t)na), memcpy(key + 2 + na, b, (size_t)nb);
            if (table_put(&t->merges, key, 2 + na + nb, rank++)) goto done;
        }
        line = nl ? nl + 1 : text + size;
    }
    if (rank == 0) { set_err(err, err_len, "%s: no merges (GPT-2's merges.txt has 50000)", path); goto done; }
    rc = 0;
done:
    if (rc && !err[0]) set_err(err, err_len, "%s: out of memory", path);
    return rc;
}

/** Both files' bytes to a tokenizer; `merges` is cut into lines in place (merges[merges_len] must exist). */
static gpt2_tokenizer *parse_both(const char *vocab_name, const char *vocab, size_t vocab_len, const char *merges_name,
                                  char *merges, size_t merges_len, char *err, size_t err_len)
{
    gpt2_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return set_err(err, err_len, "out of memory"), NULL;
    err[0] = '\0';
    make_byte_map(t->byte_of);
    if (parse_vocab(t, vocab_name, vocab, vocab_len, err, err_len) ||
        parse_merges(t, merges_name, merges, merges_len, err, err_len)) {
        tok_free(t);
        return NULL;
    }
    return t;
}

gpt2_tokenizer *tok_load(const char *vocab_json, const char *merges_txt, char *err, size_t err_len)
{
    size_t vocab_len = 0, merges_len = 0;
    err[0] = '\0';
    char *vocab = read_file(vocab_json, &vocab_len, err, err_len);
    char *merges = vocab ? read_file(merges_txt, &merges_len, err, err_len) : NULL;
    gpt2_tokenizer *t = merges ? parse_both(vocab_json, vocab, vocab_len, merges_txt, merges, merges_len, err, err_len)
                               : NULL;
    free(vocab), free(merges);
    return t;
}

gpt2_tokenizer *tok_load_memory(const char *vocab_json, size_t vocab_len, const char *merges_txt, size_t merges_len,
                                char *err, size_t err_len)
{
    char *merges = malloc(merges_len + 1); /* a copy: parsing cuts it into lines */
    if (!merges) return set_err(err, err_len, "out of memory"), NULL;
    memcpy(merges, merges_txt, merges_len);
    merges[merges_len] = '\0';
    gpt2_tokenizer *t = parse_both("vocab.json", vocab_json, vocab_len, "merges.txt", merges, merges_len, err, err_len);
    free(merges);
    return t;
}

void tok_free(gpt2_tokenizer *t)
{
    if (!t) return;
    for (int i = 0; t->bytes && i < t->n_ids; ++i) free(t->bytes[i]);
    free(t->bytes), free(t->len);
    table_free(&t->vocab), table_free(&t->merges);
    free(t);
}

int tok_vocab_size(const gpt2_tokenizer *t) { return t->n_ids; }

long tok_utf8_error(const char *text, size_t len)
{
    unsigned cp;
    for (size_t i = 0, step; i < len; i += step)
        if (!(step = utf8_next((const unsigned char *)text + i, len - i, &cp))) return (long)i;
    return -1;
}

/* ---- pre-tokenizer ------------------------------------------------------ */

enum { CL_SPACE, CL_LETTER, CL_DIGIT, CL_OTHER };

static int class_of(unsigned char c)
{
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f') return CL_SPACE;
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80) return CL_LETTER;
    if (c >= '0' && c <= '9') return CL_DIGIT;
    return CL_OTHER;
}

/** Length of the pre-token starting at s[0] (GPT-2's pattern, alternatives in its order). */
static size_t next_piece(const char *s, size_t n)
{
    static const char *const contractions[] = {"'s", "'t", "'re", "'ve", "'m", "'ll", "'d"};
    for (int i = 0; i < 7; ++i) {
        size_t k = strlen(contractions[i]);
        if (n >= k && memcmp(s, contractions[i], k) == 0) return k;
    }
    size_t i = 0;
    if (s[0] == ' ' && n > 1 && class_of((unsigned char)s[1]) != CL_SPACE) i = 1; /* " ?" then a run */
    int cl = class_of((unsigned char)s[i]);
    if (cl != CL_SPACE) {
        size_t j = i + 1;
        while (j < n && class_of((unsigned char)s[j]) == cl) ++j;
        return j;
    }
    size_t j = 0; /* whitespace: all of it at the end, else all but the last (which goes with the next word) */
    while (j < n && class_of((unsigned char)s[j]) == CL_SPACE) ++j;
    if (j < n && j > 1) return j - 1;
    return j;
}

/** BPE over one piece: merge the lowest-ranked adjacent pair everywhere, until no pair has a rank. */
static int encode_piece(const gpt2_tokenizer *t, const char *s, int n, int *ids, int max_ids, int *count)
{
    int *start = malloc((size_t)n * sizeof(int)), *len = malloc((size_t)n * sizeof(int)), m = n;
    char *key = malloc((size_t)n + 2);
    if (!start || !len || !key) abort();
    for (int i = 0; i < n; ++i) start[i] = i, len[i] = 1;
    for (;;) {
        int best = -1, best_rank = 0;
        for (int i = 0; i + 1 < m; ++i) {
            key[0] = (char)(len[i] & 255), key[1] = (char)(len[i] >> 8);
            memcpy(key + 2, s + start[i], (size_t)(len[i] + len[i + 1])); /* the pair's bytes are contiguous */
            int r;
            if (table_get(&t->merges, key, 2 + len[i] + len[i + 1], &r) && (best < 0 || r < best_rank)) best = i, best_rank = r;
        }
        if (best < 0) break;
        int a = len[best], b = len[best + 1], w = 0;
        const char *pa = s + start[best];
        for (int i = 0; i < m; ++i) { /* merge every occurrence, left to right */
            if (i + 1 < m && len[i] == a && len[i + 1] == b && memcmp(s + start[i], pa, (size_t)(a + b)) == 0) {
                start[w] = start[i], len[w++] = a + b, ++i;
            } else {
                start[w] = start[i], len[w++] = len[i];
            }
        }
        m = w;
    }
    int rc = 0;
    for (int i = 0; i < m; ++i) {
        int id;
        if (!table_get(&t->vocab, s + start[i], len[i], &id)) { rc = -1; break; }
        if (*count < max_ids) ids[*count] = id;
        ++*count;
    }
    free(start), free(len), free(key);
    return rc;
}

int tok_encode(const gpt2_tokenizer *t, const char *text, size_t len, int *ids, int max_ids)
{
    int count = 0;
    for (size_t i = 0; i < len;) {
        size_t k = next_piece(text + i, len - i);
        if (k > (1u << 20)) return -1;
        if (encode_piece(t, text + i, (int)k, ids, max_ids, &count)) return -1;
        i += k;
    }
    return count;
}

long tok_decode(const gpt2_tokenizer *t, const int *ids, int n, char *out, size_t cap)
{
    size_t k = 0;
    for (int i = 0; i < n; ++i) {
        if (ids[i] < 0 || ids[i] >= t->n_ids || !t->bytes[ids[i]]) return -1;
        for (int j = 0; j < t->len[ids[i]]; ++j, ++k)
            if (k < cap) out[k] = t->bytes[ids[i]][j];
    }
    return (long)k;
}
