/**
 * @file tests/test_gpt2.c
 * @brief CPU tests of stage 10's host side: the safetensors reader against
 *        crafted bad files, the model binding, the CPU reference (full forward
 *        against the KV-cached step), the BPE tokenizer on a small
 *        vocabulary made here, and the order of v3's argmax keys.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "argmax_key.h"
#include "fp16.h"
#include "gpt2.h"
#include "model.h"
#include "rng.h"
#include "safetensors.h"
#include "test_util.h"
#include "tokenizer.h"

/** A file: 8-byte length, the header, `data_len` bytes of data (0..255 repeating). */
static uint8_t *make_file(const char *header, size_t data_len, size_t *size)
{
    size_t n = strlen(header);
    *size = 8 + n + data_len;
    uint8_t *b = malloc(*size);
    for (int i = 0; i < 8; ++i) b[i] = (uint8_t)((uint64_t)n >> (8 * i));
    memcpy(b + 8, header, n);
    for (size_t i = 0; i < data_len; ++i) b[8 + n + i] = (uint8_t)i;
    return b;
}

/** Parse and expect failure with `needle` in the message. */
static void expect_bad(const uint8_t *b, size_t size, const char *needle)
{
    st_file f;
    char err[256] = "";
    int rc = st_parse(b, size, &f, err, sizeof err);
    if (rc == 0 || !strstr(err, needle)) fprintf(stderr, "expected an error with '%s', got rc %d: '%s'\n", needle, rc, err);
    EXPECT(rc != 0 && strstr(err, needle));
    EXPECT(strchr(err, '\n') == NULL); /* one line */
}

static void test_safetensors(void)
{
    size_t size;
    uint8_t *b = make_file("{\"__metadata__\":{\"format\":\"pt\",\"x\":[1,{\"y\":null}]},"
                           "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                           "\"b\":{\"shape\":[2,1],\"dtype\":\"F16\",\"data_offsets\":[8,12]}}   ", 12, &size);
    st_file f;
    char err[256];
    EXPECT(st_parse(b, size, &f, err, sizeof err) == 0);
    EXPECT(f.n_tensors == 2 && f.data_size == 12);
    const st_tensor *t = st_find(&f, "b");
    EXPECT(t && t->dtype == ST_F16 && t->ndim == 2 && t->shape[0] == 2 && t->begin == 8 && st_numel(t) == 2);
    float v[2];
    EXPECT(st_read_f32(&f, st_find(&f, "a"), v, err, sizeof err) == 0);
    uint32_t bits0 = 0x03020100u;
    float f0;
    memcpy(&f0, &bits0, 4);
    EXPECT(v[0] == f0);
    st_free(&f);
    free(b);

    /* each way a file can be bad gives one line naming the place */
    uint8_t tiny[5] = {0};
    expect_bad(tiny, sizeof tiny, "shorter than the 8-byte header length");
    b = make_file("{}", 0, &size);
    b[0] = 200; /* header length past the end */
    expect_bad(b, size, "bad header length 200");
    free(b);
    static const struct {
        const char *header;
        size_t data;
        const char *needle;
    } cases[] = {
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]", 8, "bad header at byte"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}} x", 8, "text after the header"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, "tensor 'a': data_offsets [0, 8] outside the 4 data bytes"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, "overlap at data byte 4"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, "tensor 'a': 8 bytes at [0, 8), but F32 shape needs 12"},
        {"{\"a\":{\"dtype\":\"F8\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2, "tensor 'a': unknown dtype 'F8'"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, "tensor 'a': entry lacks \"data_offsets\""},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, "outside"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, "non-negative integer"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "appears twice"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[99999999999999,99999999999999],\"data_offsets\":[0,8]}}", 8, "too large"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,18446744073709551616]}}", 8, "too large"},
        {"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]", 0, "expected '{'"},
        {"{\"__metadata__\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}", 0, "nesting too deep"},
        {"{\"a\\q\":{}}", 0, "bad escape"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        b = make_file(cases[i].header, cases[i].data, &size);
        expect_bad(b, size, cases[i].needle);
        free(b);
    }
    /* a tensor of a dtype the model cannot use */
    b = make_file("{\"i\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8, &size);
    EXPECT(st_parse(b, size, &f, err, sizeof err) == 0);
    EXPECT(st_read_f32(&f, st_find(&f, "i"), v, err, sizeof err) != 0 && strstr(err, "tensor 'i' has dtype I64"));
    st_free(&f);
    free(b);
    /* every truncation of a valid file fails cleanly (or parses a valid prefix: never crashes) */
    b = make_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, &size);
    for (size_t cut = 0; cut < size; ++cut) {
        uint8_t *c = malloc(cut + 1);
        memcpy(c, b, cut);
        if (st_parse(c, cut, &f, err, sizeof err) == 0) st_free(&f);
        free(c);
    }
    free(b);
}

static const gpt2_config tiny = {300, 32, 2, 2, 128};

/** Read a whole file. */
static uint8_t *slurp(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *size = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(*size);
    if (fread(b, 1, *size, f) != *size) *size = 0;
    fclose(f);
    return b;
}

/** The file with `find` in its header replaced by `repl` (the header length updated). */
static uint8_t *edit_header(const uint8_t *file, size_t size, const char *find, const char *repl, size_t *out_size)
{
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = n << 8 | file[i];
    char *h = malloc(n + 1);
    memcpy(h, file + 8, n), h[n] = '\0';
    char *at = strstr(h, find);
    if (!at) return NULL;
    size_t nh = n - strlen(find) + strlen(repl);
    char *h2 = malloc(nh + 1);
    size_t pre = (size_t)(at - h);
    memcpy(h2, h, pre), memcpy(h2 + pre, repl, strlen(repl)), strcpy(h2 + pre + strlen(repl), at + strlen(find));
    *out_size = 8 + nh + (size - 8 - n);
    uint8_t *b = malloc(*out_size);
    for (int i = 0; i < 8; ++i) b[i] = (uint8_t)((uint64_t)nh >> (8 * i));
    memcpy(b + 8, h2, nh), memcpy(b + 8 + nh, file + 8 + n, size - 8 - n);
    free(h), free(h2);
    return b;
}

static void test_model(void)
{
    gpt2_model m, back;
    char err[256];
    EXPECT(gpt2_model_random(&m, &tiny, 5) == 0);
    const char *paths[2] = {"test_gpt2_tiny.safetensors", "test_gpt2_tiny_prefixed.safetensors"};
    for (int prefix = 0; prefix < 2; ++prefix) {
        EXPECT(gpt2_model_write(&m, paths[prefix], prefix, err, sizeof err) == 0);
        EXPECT(gpt2_model_load(paths[prefix], 0, &back, err, sizeof err) == 0);
        EXPECT(back.cfg.vocab == 300 && back.cfg.max_T == 32 && back.cfg.n_layer == 2 && back.cfg.n_head == 2 && back.cfg.C == 128);
        EXPECT(back.n_params == m.n_params && memcmp(back.memory, m.memory, m.n_params * 4) == 0);
        gpt2_model_free(&back);
    }
    size_t size, size2;
    uint8_t *file = slurp(paths[0], &size);
    EXPECT(file != NULL);
    st_file f;
    /* a missing tensor, a wrong shape (same bytes), a wrong dtype: named */
    static const struct {
        const char *find, *repl, *needle;
    } cases[] = {
        {"h.1.mlp.c_fc.bias", "h.1.mlp.c_fc.biaz", "missing tensor 'h.1.mlp.c_fc.bias'"},
        {"\"ln_f.bias\":{\"dtype\":\"F32\",\"shape\":[128]", "\"ln_f.bias\":{\"dtype\":\"F32\",\"shape\":[64,2]",
         "tensor 'ln_f.bias' has shape [64, 2], expected [128]"},
        {"\"ln_f.bias\":{\"dtype\":\"F32\",\"shape\":[128]", "\"ln_f.bias\":{\"dtype\":\"I32\",\"shape\":[128]",
         "tensor 'ln_f.bias' has dtype I32"},
        {"\"wte.weight\"", "\"wtf.weight\"", "missing or not 2-D: tensor 'wte.weight'"},
        {"\"h.0.ln_1.weight\"", "\"h.0.ln_1.weighs\"", "no blocks"},
    };
    for (size_t i = 0; file && i < sizeof cases / sizeof cases[0]; ++i) {
        uint8_t *bad = edit_header(file, size, cases[i].find, cases[i].repl, &size2);
        EXPECT(bad != NULL);
        if (!bad) continue;
        EXPECT(st_parse(bad, size2, &f, err, sizeof err) == 0);
        int rc = gpt2_model_from_safetensors(&f, 0, &back, err, sizeof err);
        if (rc == 0 || !strstr(err, cases[i].needle)) fprintf(stderr, "expected '%s', got '%s'\n", cases[i].needle, err);
        EXPECT(rc != 0 && strstr(err, cases[i].needle));
        st_free(&f);
        free(bad);
    }
    free(file);
    EXPECT(gpt2_model_load("no/such/file.safetensors", 0, &back, err, sizeof err) != 0 && strstr(err, "cannot open"));
    gpt2_model_free(&m);
    remove(paths[0]), remove(paths[1]);
}

static void test_reference(void)
{
    gpt2_model m;
    EXPECT(gpt2_model_random(&m, &tiny, 9) == 0);
    enum { T = 20 };
    int tokens[T];
    wb_rng r;
    wb_rng_seed(&r, 3);
    for (int t = 0; t < T; ++t) tokens[t] = wb_rng_int(&r, 0, tiny.vocab - 1);
    float *full = malloc((size_t)T * tiny.vocab * 4), *step = malloc((size_t)tiny.vocab * 4);
    float *full2 = malloc((size_t)T * tiny.vocab * 4);
    ref_gpt2_forward(&m.cfg, &m.w, tokens, T, full);
    /* the KV-cached step gives the full forward's logits at every position */
    ref_gpt2_cache cache;
    EXPECT(ref_gpt2_cache_init(&cache, &m.cfg) == 0);
    double worst = 0, spread = 0;
    for (int t = 0; t < T; ++t) {
        EXPECT(ref_gpt2_step(&m.cfg, &m.w, &cache, tokens[t], step) == 0);
        for (int v = 0; v < tiny.vocab; ++v) {
            worst = fmax(worst, fabs(step[v] - full[(size_t)t * tiny.vocab + v]));
            spread = fmax(spread, fabs(step[v]));
        }
    }
    EXPECT(worst < 1e-5 && spread > 1e-2); /* equal, and not trivially (logits of some size) */
    /* causal: changing token 15 changes nothing before position 15, and something at 15 */
    tokens[15] = (tokens[15] + 1) % tiny.vocab;
    ref_gpt2_forward(&m.cfg, &m.w, tokens, T, full2);
    EXPECT(memcmp(full, full2, (size_t)15 * tiny.vocab * 4) == 0);
    EXPECT(memcmp(full + 15 * tiny.vocab, full2 + 15 * tiny.vocab, (size_t)tiny.vocab * 4) != 0);
    /* a full cache says so */
    cache.len = tiny.max_T;
    EXPECT(ref_gpt2_step(&m.cfg, &m.w, &cache, 0, step) == -1);
    ref_gpt2_cache_free(&cache);
    free(full), free(full2), free(step);
    gpt2_model_free(&m);
}

/** GPT-2's character for byte b (UTF-8 into out): printable Latin-1 as itself, others from U+0100 on. */
static int byte_char(int b, char *out)
{
    int cp = b, extra = 0;
    int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    if (!printable) {
        for (int x = 0; x < b; ++x) extra += !((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF));
        cp = 256 + extra;
    }
    if (cp < 0x80) return out[0] = (char)cp, 1;
    out[0] = (char)(0xC0 | cp >> 6), out[1] = (char)(0x80 | (cp & 63));
    return 2;
}

/** The GPT-2 form of a byte string. */
static void encode_chars(const char *s, char *out)
{
    size_t k = 0;
    for (; *s; ++s) {
        char c = *s;
        if (c == '"' || c == '\\') out[k++] = '\\'; /* for JSON */
        k += (size_t)byte_char((unsigned char)c, out + k);
    }
    out[k] = '\0';
}

static void test_tokenizer(void)
{
    /* a vocabulary: the 256 bytes (ids 0–255 = byte values), then merged tokens */
    static const char *const merges[][2] = {{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {" ", "w"},
                                            {"o", "r"}, {" w", "or"}, {"l", "d"}, {" wor", "ld"}, {"'", "s"}};
    FILE *v = fopen("test_vocab.json", "w"), *mf = fopen("test_merges.txt", "w");
    EXPECT(v && mf);
    if (!v || !mf) return;
    fprintf(v, "{");
    char a[64], b[64];
    for (int byte = 0; byte < 256; ++byte) {
        char one[2] = {(char)byte, 0}, buf[8];
        if (byte == 0) { fprintf(v, "\"\\u0100\": 0"); continue; } /* an escape, as real files have */
        encode_chars(one, buf);
        fprintf(v, ", \"%s\": %d", buf, byte);
    }
    fprintf(mf, "#version: 0.2\n");
    for (int i = 0; i < 10; ++i) {
        char joined[64];
        snprintf(joined, sizeof joined, "%s%s", merges[i][0], merges[i][1]);
        encode_chars(joined, a);
        fprintf(v, ", \"%s\": %d", a, 256 + i);
        encode_chars(merges[i][0], a), encode_chars(merges[i][1], b);
        fprintf(mf, "%s %s\n", a, b);
    }
    fprintf(v, "}\n");
    fclose(v), fclose(mf);
    char err[256];
    gpt2_tokenizer *t = tok_load("test_vocab.json", "test_merges.txt", err, sizeof err);
    if (!t) fprintf(stderr, "tok_load: %s\n", err);
    EXPECT(t != NULL);
    if (!t) return;
    EXPECT(tok_vocab_size(t) == 266);
    int ids[64];
    /* "hello world": two tokens; "hello  world!": the double space splits before " world" */
    EXPECT(tok_encode(t, "hello world", 11, ids, 64) == 2 && ids[0] == 259 && ids[1] == 264);
    int n = tok_encode(t, "hello  world!", 13, ids, 64);
    EXPECT(n == 4 && ids[0] == 259 && ids[1] == ' ' && ids[2] == 264 && ids[3] == '!');
    /* contractions split off: "it's" → "it" (two bytes), "'s" */
    n = tok_encode(t, "it's", 4, ids, 64);
    EXPECT(n == 3 && ids[0] == 'i' && ids[1] == 't' && ids[2] == 265);
    /* digits and letters are separate pieces: "he2" → "he", "2" */
    n = tok_encode(t, "he2", 3, ids, 64);
    EXPECT(n == 2 && ids[0] == 256 && ids[1] == '2');
    /* too small a buffer: the count comes back, nothing written past max_ids */
    ids[1] = -7;
    EXPECT(tok_encode(t, "hello world", 11, ids, 1) == 2 && ids[1] == -7);
    /* decode(encode(s)) == s for random bytes, UTF-8 and control characters included */
    wb_rng r;
    wb_rng_seed(&r, 8);
    char text[300], back[300];
    int big[400];
    for (int trial = 0; trial < 200; ++trial) {
        int len = wb_rng_int(&r, 0, 299);
        for (int i = 0; i < len; ++i) text[i] = (char)(trial % 2 ? wb_rng_int(&r, 0, 255) : " helowrd's\n\t2!"[wb_rng_int(&r, 0, 13)]);
        int k = tok_encode(t, text, (size_t)len, big, 400);
        EXPECT(k >= 0 && k <= len);
        long m = tok_decode(t, big, k, back, sizeof back);
        EXPECT(m == len && memcmp(text, back, (size_t)len) == 0);
    }
    EXPECT(tok_decode(t, (int[]){266}, 1, back, sizeof back) == -1);
    tok_free(t);
    /* a broken merges file is named with its line */
    FILE *bad = fopen("test_merges_bad.txt", "w");
    fprintf(bad, "#version: 0.2\nh e\nnospace\n");
    fclose(bad);
    EXPECT(tok_load("test_vocab.json", "test_merges_bad.txt", err, sizeof err) == NULL && strstr(err, "test_merges_bad.txt:3"));
    EXPECT(tok_load("missing.json", "test_merges.txt", err, sizeof err) == NULL && strstr(err, "cannot open 'missing.json'"));
    remove("test_vocab.json"), remove("test_merges.txt"), remove("test_merges_bad.txt");
}

/** v1/v2's argmax order: a larger value, then a lower token. */
static int better(float v, int i, float bv, int bi) { return v > bv || (v == bv && i < bi); }

/**
 * v3's LM head takes the argmax as an atomicMax of 64-bit keys: their unsigned
 * order must be v1/v2's order of (value, token) for every pair of numbers,
 * ties, ±0, ±inf and denormals included; NaN below everything; and the key
 * must give its token back.
 */
static void test_argmax_key(void)
{
    const float special[] = {0.0f, -0.0f, 1.0f, -1.0f, INFINITY, -INFINITY, 1e-40f, -1e-40f, 3.4e38f, -3.4e38f,
                             0.5f, -0.5f, 1.0000001f};
    const int n_special = (int)(sizeof special / sizeof special[0]);
    wb_rng r;
    wb_rng_seed(&r, 5);
    int wrong = 0;
    for (int trial = 0; trial < 200000; ++trial) {
        float a, b;
        int i = wb_rng_int(&r, 0, 50256), j = wb_rng_int(&r, 0, 50256);
        if (trial % 3 == 0) a = special[wb_rng_int(&r, 0, n_special - 1)], b = special[wb_rng_int(&r, 0, n_special - 1)];
        else if (trial % 3 == 1) a = (float)wb_rng_int(&r, -4, 4), b = (float)wb_rng_int(&r, -4, 4); /* many ties */
        else a = wb_rng_uniform(&r, -30.0f, 30.0f), b = wb_rng_uniform(&r, -30.0f, 30.0f);
        if (i == j) continue;
        unsigned long long ka = gpt2_argmax_key(a, i), kb = gpt2_argmax_key(b, j);
        wrong += (ka > kb) != better(a, i, b, j);
        wrong += gpt2_argmax_key_token(ka, 50257) != i;
    }
    EXPECT(wrong == 0);
    EXPECT(gpt2_argmax_key(NAN, 3) == 0ull && gpt2_argmax_key(-NAN, 3) == 0ull);
    EXPECT(gpt2_argmax_key(-INFINITY, 50256) > gpt2_argmax_key(NAN, 0));
    EXPECT(gpt2_argmax_key_token(0ull, 10) == 0);                         /* a row of NaN: token 0 */
    EXPECT(gpt2_argmax_key_token(gpt2_argmax_key(1.0f, 12), 10) == 0);    /* outside the vocabulary: 0 */
    /* a row's argmax by keys equals the loop's, on rows with ties and NaNs */
    for (int row = 0; row < 200; ++row) {
        enum { V = 997 };
        float x[V];
        for (int k = 0; k < V; ++k) x[k] = wb_rng_int(&r, 0, 9) == 0 ? NAN : (float)wb_rng_int(&r, -20, 20) * 0.25f;
        float bv = -INFINITY; /* as argmax_kernel: NaN is never better; an all-NaN row gives token 0 */
        int bi = 0x7fffffff;
        for (int k = 0; k < V; ++k)
            if (better(x[k], k, bv, bi)) bv = x[k], bi = k;
        int best = bi < V ? bi : 0;
        unsigned long long key = 0;
        for (int k = V - 1; k >= 0; --k) key = gpt2_argmax_key(x[k], k) > key ? gpt2_argmax_key(x[k], k) : key;
        EXPECT(gpt2_argmax_key_token(key, V) == best);
    }
}

/* The decode step's v24 folds a LayerNorm into the linear after it (model.h: gpt2_fold_layernorm). LN(x)·w + bias
 * worked out directly, in double, against rstd·(x·w' − mean·Σw') + bias' as the step works it out (float dot
 * products and epilogue), with w' kept in fp32 and rounded to fp16, on rows whose mean is near zero, far from it
 * (40 ± 1: the mean's term cancels most of the dot product) and with one value far larger than the rest. */
static void test_fold(void)
{
    enum { K = 200, N = 37 };
    float *w = malloc(K * N * sizeof *w), *wf = malloc(K * N * sizeof *wf), bias[N], bs[2 * N], g[K], b[K], x[K];
    if (!w || !wf) {
        free(w), free(wf);
        EXPECT(0 && "out of memory");
        return;
    }
    wb_fill_uniform_f32(w, K * N, -0.2f, 0.2f, 11);
    wb_fill_uniform_f32(bias, N, -0.5f, 0.5f, 12);
    wb_fill_uniform_f32(g, K, 0.5f, 1.5f, 13);
    wb_fill_uniform_f32(b, K, -0.3f, 0.3f, 14);
    for (int fp16 = 0; fp16 < 2; ++fp16) {
        EXPECT(gpt2_fold_layernorm(w, bias, g, b, K, N, fp16 ? wb_round_to_half : NULL, wf, bs) == 0);
        int sums_ok = 1, stored_ok = 1;
        for (int n = 0; n < N; ++n) { /* Σ_k w'_kn of the stored values, to the float */
            double sum = 0.0;
            for (int k = 0; k < K; ++k) sum += wf[k * N + n];
            sums_ok &= (float)sum == bs[N + n];
        }
        for (int i = 0; i < K * N; ++i) {
            const float f = g[i / N] * w[i];
            stored_ok &= wf[i] == (fp16 ? wb_round_to_half(f) : f);
        }
        EXPECT(sums_ok);
        EXPECT(stored_ok);
        for (int row = 0; row < 3; ++row) {
            wb_fill_uniform_f32(x, K, -1.0f, 1.0f, 20 + row);
            for (int k = 0; row == 1 && k < K; ++k) x[k] += 40.0f;
            if (row == 2) x[17] = 25.0f;
            double mean = 0.0, var = 0.0;
            for (int k = 0; k < K; ++k) mean += x[k];
            mean /= K;
            for (int k = 0; k < K; ++k) var += (x[k] - mean) * (x[k] - mean);
            const double rstd = 1.0 / sqrt(var / K + GPT2_LN_EPS);
            double worst = 0.0;
            for (int n = 0; n < N; ++n) {
                double want = bias[n];
                float dot = 0.0f;
                for (int k = 0; k < K; ++k) {
                    want += ((x[k] - mean) * rstd * g[k] + b[k]) * w[k * N + n];
                    dot = fmaf(x[k], wf[k * N + n], dot);
                }
                const float got = fmaf((float)rstd, dot - (float)mean * bs[N + n], bs[n]);
                worst = fmax(worst, fabs(got - want));
            }
            if (worst > (fp16 ? 2e-3 : 5e-4)) fprintf(stderr, "fold %s, row %d: off by %g\n", fp16 ? "fp16" : "fp32", row, worst);
            EXPECT(worst <= (fp16 ? 2e-3 : 5e-4));
        }
    }
    free(w), free(wf);
}

/** `test_gpt2 write-model FILE tiny|124m SEED`: a seeded random model written as a GPT-2 safetensors file, for the
 *  stage program's --weights (no real GPT-2 files are needed to test that path). */
static int write_model(const char *path, const char *shape, const char *seed)
{
    gpt2_config cfg = gpt2_config_124m();
    if (strcmp(shape, "tiny") == 0) cfg = (gpt2_config){300, 64, 2, 2, 128}; /* stage 10 --check's tiny shape */
    gpt2_model m;
    char err[256];
    if (gpt2_model_random(&m, &cfg, strtoull(seed, NULL, 10)) != 0) return fprintf(stderr, "out of memory\n"), 1;
    int rc = gpt2_model_write(&m, path, 1, err, sizeof err);
    if (rc) fprintf(stderr, "%s: %s\n", path, err);
    gpt2_model_free(&m);
    return rc != 0;
}

int main(int argc, char **argv)
{
    if (argc == 5 && strcmp(argv[1], "write-model") == 0) return write_model(argv[2], argv[3], argv[4]);
    const wb_test_group groups[] = {{"safetensors", test_safetensors}, {"model", test_model},
                                    {"reference", test_reference}, {"tokenizer", test_tokenizer},
                                    {"argmax_key", test_argmax_key}, {"fold", test_fold}};
    return wb_test_main(argc, argv, groups, sizeof groups / sizeof groups[0]);
}
