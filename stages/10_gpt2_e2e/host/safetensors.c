/**
 * @file stages/10_gpt2_e2e/host/safetensors.c
 * @brief The safetensors reader (see safetensors.h): a JSON parser for the
 *        header's subset, then the checks of every tensor against the data.
 *        Self-contained C (no CUDA), so the fuzz target builds it alone.
 */
#include "safetensors.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/** @brief The largest header accepted (the format's own limit is 100 MB). */
#define ST_MAX_HEADER (100u * 1024u * 1024u)
/** @brief Deepest nesting of JSON values skipped (inside __metadata__ or unknown keys). */
#define ST_MAX_DEPTH 32

static const struct {
    const char *name;
    st_dtype type;
    size_t size;
} dtypes[] = {{"F64", ST_F64, 8}, {"F32", ST_F32, 4}, {"F16", ST_F16, 2}, {"BF16", ST_BF16, 2}, {"I64", ST_I64, 8},
              {"I32", ST_I32, 4}, {"I16", ST_I16, 2}, {"I8", ST_I8, 1},   {"U8", ST_U8, 1},     {"BOOL", ST_BOOL, 1}};

size_t st_dtype_size(st_dtype t)
{
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; ++i)
        if (dtypes[i].type == t) return dtypes[i].size;
    return 0;
}

const char *st_dtype_name(st_dtype t)
{
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; ++i)
        if (dtypes[i].type == t) return dtypes[i].name;
    return "?";
}

static void set_err(char *err, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
}

/* ---- the JSON subset ---------------------------------------------------- */

/** Parser state: the header text, the position, where errors go. */
typedef struct {
    const char *begin; /**< the header's first byte (file byte 8) */
    const char *p;     /**< the next byte to read */
    const char *end;   /**< one past the header */
    char *err;         /**< where a message goes */
    size_t err_len;    /**< its size */
} json;

static int json_fail(json *j, const char *what)
{
    set_err(j->err, j->err_len, "bad header at byte %zu of the file: %s", (size_t)(j->p - j->begin) + 8, what);
    return -1;
}

static void skip_ws(json *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++;
}

static int expect(json *j, char c)
{
    skip_ws(j);
    if (j->p >= j->end || *j->p != c) {
        char what[32];
        snprintf(what, sizeof what, "expected '%c'", c);
        return json_fail(j, what);
    }
    j->p++;
    return 0;
}

static int hex4(json *j, unsigned *v)
{
    *v = 0;
    for (int i = 0; i < 4; ++i, ++j->p) {
        if (j->p >= j->end) return json_fail(j, "truncated \\u escape");
        char c = *j->p;
        unsigned d = c >= '0' && c <= '9' ? (unsigned)(c - '0') : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
                   : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10) : 99u;
        if (d == 99u) return json_fail(j, "bad \\u escape");
        *v = *v * 16 + d;
    }
    return 0;
}

/** A string into out (UTF-8, NUL-terminated); out == NULL skips it. Longer than cap − 1 bytes: an error. */
static int parse_string(json *j, char *out, size_t cap)
{
    skip_ws(j);
    if (j->p >= j->end || *j->p != '"') return json_fail(j, "expected a string");
    j->p++;
    size_t n = 0;
    for (;;) {
        if (j->p >= j->end) return json_fail(j, "unterminated string");
        unsigned char c = (unsigned char)*j->p++;
        unsigned code = c;
        char buf[4];
        int len = 1;
        if (c == '"') break;
        if (c < 0x20) return json_fail(j, "control character in a string");
        if (c == '\\') {
            if (j->p >= j->end) return json_fail(j, "unterminated string");
            char e = *j->p++;
            switch (e) {
            case '"': case '\\': case '/': code = (unsigned char)e; break;
            case 'b': code = '\b'; break;
            case 'f': code = '\f'; break;
            case 'n': code = '\n'; break;
            case 'r': code = '\r'; break;
            case 't': code = '\t'; break;
            case 'u':
                if (hex4(j, &code)) return -1;
                if (code >= 0xD800 && code < 0xDC00) { /* a surrogate pair */
                    unsigned lo;
                    if (j->end - j->p < 6 || j->p[0] != '\\' || j->p[1] != 'u') return json_fail(j, "lone surrogate");
                    j->p += 2;
                    if (hex4(j, &lo)) return -1;
                    if (lo < 0xDC00 || lo > 0xDFFF) return json_fail(j, "bad surrogate pair");
                    code = 0x10000 + ((code - 0xD800) << 10) + (lo - 0xDC00);
                }
                break;
            default: return json_fail(j, "bad escape in a string");
            }
            /* UTF-8 encode */
            if (code < 0x80) buf[0] = (char)code;
            else if (code < 0x800) buf[0] = (char)(0xC0 | code >> 6), buf[1] = (char)(0x80 | (code & 63)), len = 2;
            else if (code < 0x10000)
                buf[0] = (char)(0xE0 | code >> 12), buf[1] = (char)(0x80 | (code >> 6 & 63)),
                buf[2] = (char)(0x80 | (code & 63)), len = 3;
            else
                buf[0] = (char)(0xF0 | code >> 18), buf[1] = (char)(0x80 | (code >> 12 & 63)),
                buf[2] = (char)(0x80 | (code >> 6 & 63)), buf[3] = (char)(0x80 | (code & 63)), len = 4;
        } else {
            buf[0] = (char)c;
        }
        if (out) {
            if (n + (size_t)len >= cap) return json_fail(j, "string too long");
            memcpy(out + n, buf, (size_t)len);
        }
        n += (size_t)len;
    }
    if (out) out[n] = '\0';
    return 0;
}

/** A non-negative integer (the only numbers the tensors' entries have). */
static int parse_uint(json *j, uint64_t *v)
{
    skip_ws(j);
    if (j->p >= j->end || *j->p < '0' || *j->p > '9') return json_fail(j, "expected a non-negative integer");
    *v = 0;
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
        uint64_t d = (uint64_t)(*j->p - '0');
        if (*v > (UINT64_MAX - d) / 10) return json_fail(j, "integer too large");
        *v = *v * 10 + d;
        j->p++;
    }
    if (j->p < j->end && (*j->p == '.' || *j->p == 'e' || *j->p == 'E')) return json_fail(j, "expected an integer");
    return 0;
}

/** Skip any JSON value (for __metadata__ and keys this loader does not use). */
static int skip_value(json *j, int depth)
{
    if (depth > ST_MAX_DEPTH) return json_fail(j, "nesting too deep");
    skip_ws(j);
    if (j->p >= j->end) return json_fail(j, "expected a value");
    char c = *j->p;
    if (c == '"') return parse_string(j, NULL, 0);
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        j->p++;
        skip_ws(j);
        if (j->p < j->end && *j->p == close) return j->p++, 0;
        for (;;) {
            if (c == '{') {
                if (parse_string(j, NULL, 0) || expect(j, ':')) return -1;
            }
            if (skip_value(j, depth + 1)) return -1;
            skip_ws(j);
            if (j->p < j->end && *j->p == ',') { j->p++; continue; }
            return expect(j, close);
        }
    }
    static const char *const words[] = {"true", "false", "null"};
    for (int w = 0; w < 3; ++w) {
        size_t n = strlen(words[w]);
        if ((size_t)(j->end - j->p) >= n && memcmp(j->p, words[w], n) == 0) return j->p += n, 0;
    }
    if (c == '-' || (c >= '0' && c <= '9')) { /* any number */
        j->p++;
        while (j->p < j->end && strchr("0123456789.eE+-", *j->p)) j->p++;
        return 0;
    }
    return json_fail(j, "unexpected character");
}

/** One tensor's entry: {"dtype": .., "shape": [..], "data_offsets": [b, e]} in any order. */
static int parse_tensor(json *j, st_tensor *t)
{
    int have_dtype = 0, have_shape = 0, have_offsets = 0;
    if (expect(j, '{')) return -1;
    skip_ws(j);
    if (j->p < j->end && *j->p == '}') j->p++;
    else
        for (;;) {
            char key[32];
            if (parse_string(j, key, sizeof key) || expect(j, ':')) return -1;
            if (strcmp(key, "dtype") == 0) {
                char name[16];
                if (parse_string(j, name, sizeof name)) return -1;
                size_t i = 0;
                while (i < sizeof dtypes / sizeof dtypes[0] && strcmp(dtypes[i].name, name) != 0) ++i;
                if (i == sizeof dtypes / sizeof dtypes[0]) {
                    set_err(j->err, j->err_len, "tensor '%s': unknown dtype '%s'", t->name, name);
                    return -1;
                }
                t->dtype = dtypes[i].type, have_dtype = 1;
            } else if (strcmp(key, "shape") == 0 || strcmp(key, "data_offsets") == 0) {
                int is_shape = key[0] == 's', n = 0;
                uint64_t v[ST_MAX_DIMS];
                if (expect(j, '[')) return -1;
                skip_ws(j);
                if (j->p < j->end && *j->p == ']') j->p++;
                else
                    for (;;) {
                        if (n == (is_shape ? ST_MAX_DIMS : 2)) return json_fail(j, is_shape ? "too many dimensions" : "data_offsets needs 2 numbers");
                        if (parse_uint(j, &v[n++])) return -1;
                        skip_ws(j);
                        if (j->p < j->end && *j->p == ',') { j->p++; continue; }
                        if (expect(j, ']')) return -1;
                        break;
                    }
                if (is_shape) {
                    t->ndim = n;
                    for (int i = 0; i < n; ++i) {
                        if (v[i] > (uint64_t)1 << 40) return json_fail(j, "dimension too large");
                        t->shape[i] = (int64_t)v[i];
                    }
                    have_shape = 1;
                } else {
                    if (n != 2) return json_fail(j, "data_offsets needs 2 numbers");
                    t->begin = v[0], t->end = v[1], have_offsets = 1;
                }
            } else if (skip_value(j, 1)) {
                return -1;
            }
            skip_ws(j);
            if (j->p < j->end && *j->p == ',') { j->p++; continue; }
            if (expect(j, '}')) return -1;
            break;
        }
    if (!have_dtype || !have_shape || !have_offsets) {
        set_err(j->err, j->err_len, "tensor '%s': entry lacks %s", t->name,
                !have_dtype ? "\"dtype\"" : !have_shape ? "\"shape\"" : "\"data_offsets\"");
        return -1;
    }
    return 0;
}

/* ---- the file ----------------------------------------------------------- */

int64_t st_numel(const st_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; ++i) n *= t->shape[i];
    return n;
}

static int cmp_begin(const void *a, const void *b)
{
    const st_tensor *x = *(const st_tensor *const *)a, *y = *(const st_tensor *const *)b;
    return (x->begin > y->begin) - (x->begin < y->begin);
}

int st_parse(const uint8_t *buf, size_t size, st_file *out, char *err, size_t err_len)
{
    memset(out, 0, sizeof *out);
    if (size < 8) {
        set_err(err, err_len, "not a safetensors file: %zu bytes, shorter than the 8-byte header length", size);
        return -1;
    }
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = n << 8 | buf[i];
    if (n < 2 || n > ST_MAX_HEADER || n > size - 8) {
        set_err(err, err_len, "bad header length %llu (bytes 0-7): the file has %zu bytes after it%s",
                (unsigned long long)n, size - 8, n > ST_MAX_HEADER ? " (and the limit is 100 MB)" : "");
        return -1;
    }
    json j = {(const char *)buf + 8, (const char *)buf + 8, (const char *)buf + 8 + n, err, err_len};
    int cap = 64;
    out->tensors = malloc((size_t)cap * sizeof(st_tensor));
    if (!out->tensors) return set_err(err, err_len, "out of memory"), -1;
    if (expect(&j, '{')) goto fail;
    skip_ws(&j);
    if (j.p < j.end && *j.p == '}') j.p++;
    else
        for (;;) {
            char name[ST_MAX_NAME];
            if (parse_string(&j, name, sizeof name) || expect(&j, ':')) goto fail;
            if (strcmp(name, "__metadata__") == 0) {
                if (skip_value(&j, 1)) goto fail;
            } else {
                if (st_find(out, name)) {
                    set_err(err, err_len, "tensor '%s' appears twice in the header", name);
                    goto fail;
                }
                if (out->n_tensors == cap) {
                    st_tensor *more = realloc(out->tensors, (size_t)(cap *= 2) * sizeof(st_tensor));
                    if (!more) { set_err(err, err_len, "out of memory"); goto fail; }
                    out->tensors = more;
                }
                st_tensor *t = &out->tensors[out->n_tensors];
                memset(t, 0, sizeof *t);
                memcpy(t->name, name, strlen(name) + 1);
                if (parse_tensor(&j, t)) goto fail;
                out->n_tensors++;
            }
            skip_ws(&j);
            if (j.p < j.end && *j.p == ',') { j.p++; continue; }
            if (expect(&j, '}')) goto fail;
            break;
        }
    skip_ws(&j); /* the header may be padded with spaces */
    if (j.p != j.end) {
        json_fail(&j, "text after the header's object");
        goto fail;
    }
    out->data = buf + 8 + n;
    out->data_size = size - 8 - (size_t)n;
    /* every tensor: bytes = elements × size, inside the data, no two overlapping */
    for (int i = 0; i < out->n_tensors; ++i) {
        const st_tensor *t = &out->tensors[i];
        uint64_t numel = 1;
        for (int k = 0; k < t->ndim; ++k) {
            if (t->shape[k] && numel > UINT64_MAX / 16 / (uint64_t)t->shape[k]) {
                set_err(err, err_len, "tensor '%s': shape too large", t->name);
                goto fail;
            }
            numel *= (uint64_t)t->shape[k];
        }
        if (t->begin > t->end || t->end > out->data_size) {
            set_err(err, err_len, "tensor '%s': data_offsets [%llu, %llu] outside the %zu data bytes", t->name,
                    (unsigned long long)t->begin, (unsigned long long)t->end, out->data_size);
            goto fail;
        }
        if (t->end - t->begin != numel * st_dtype_size(t->dtype)) {
            set_err(err, err_len, "tensor '%s': %llu bytes at [%llu, %llu), but %s shape needs %llu", t->name,
                    (unsigned long long)(t->end - t->begin), (unsigned long long)t->begin,
                    (unsigned long long)t->end, st_dtype_name(t->dtype),
                    (unsigned long long)(numel * st_dtype_size(t->dtype)));
            goto fail;
        }
    }
    if (out->n_tensors > 1) {
        const st_tensor **order = malloc((size_t)out->n_tensors * sizeof *order);
        if (!order) { set_err(err, err_len, "out of memory"); goto fail; }
        for (int i = 0; i < out->n_tensors; ++i) order[i] = &out->tensors[i];
        qsort(order, (size_t)out->n_tensors, sizeof *order, cmp_begin);
        for (int i = 1; i < out->n_tensors; ++i)
            if (order[i]->begin < order[i - 1]->end) {
                set_err(err, err_len, "tensors '%s' and '%s' overlap at data byte %llu", order[i - 1]->name,
                        order[i]->name, (unsigned long long)order[i]->begin);
                free(order);
                goto fail;
            }
        free(order);
    }
    return 0;
fail:
    free(out->tensors);
    memset(out, 0, sizeof *out);
    return -1;
}

int st_load(const char *path, st_file *out, char *err, size_t err_len)
{
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f) return set_err(err, err_len, "cannot open '%s': %s", path, strerror(errno)), -1;
    uint8_t *buf = NULL;
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0) size = ftell(f);
    if (size < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return set_err(err, err_len, "cannot read '%s'", path), -1;
    }
    buf = malloc((size_t)size + 1);
    if (!buf || fread(buf, 1, (size_t)size, f) != (size_t)size) {
        fclose(f);
        free(buf);
        return set_err(err, err_len, "cannot read %ld bytes of '%s'", size, path), -1;
    }
    fclose(f);
    if (st_parse(buf, (size_t)size, out, err, err_len)) {
        free(buf);
        return -1;
    }
    out->owned = buf;
    return 0;
}

void st_free(st_file *f)
{
    free(f->tensors);
    free(f->owned);
    memset(f, 0, sizeof *f);
}

const st_tensor *st_find(const st_file *f, const char *name)
{
    for (int i = 0; i < f->n_tensors; ++i)
        if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
    return NULL;
}

/** IEEE half → float, bit by bit (no CUDA here). */
static float half_bits_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = h >> 10 & 31, man = h & 1023, bits;
    if (exp == 0) {
        if (man == 0) bits = sign;
        else { /* subnormal: normalise */
            exp = 127 - 15 + 1;
            while (!(man & 1024)) man <<= 1, exp--;
            bits = sign | exp << 23 | (man & 1023) << 13;
        }
    } else if (exp == 31) {
        bits = sign | 0xFFu << 23 | man << 13;
    } else {
        bits = sign | (exp + 127 - 15) << 23 | man << 13;
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

int st_read_f32(const st_file *f, const st_tensor *t, float *dst, char *err, size_t err_len)
{
    const uint8_t *src = f->data + t->begin;
    int64_t n = st_numel(t);
    if (t->dtype != ST_F32 && t->dtype != ST_F16 && t->dtype != ST_BF16) {
        set_err(err, err_len, "tensor '%s' has dtype %s; weights must be F32, F16 or BF16", t->name,
                st_dtype_name(t->dtype));
        return -1;
    }
    for (int64_t i = 0; i < n; ++i) {
        if (t->dtype == ST_F32) {
            memcpy(&dst[i], src + 4 * i, 4); /* the data need not be 4-byte aligned */
        } else {
            uint16_t h = (uint16_t)(src[2 * i] | src[2 * i + 1] << 8);
            if (t->dtype == ST_F16) {
                dst[i] = half_bits_to_float(h);
            } else {
                uint32_t bits = (uint32_t)h << 16;
                memcpy(&dst[i], &bits, 4);
            }
        }
    }
    return 0;
}
