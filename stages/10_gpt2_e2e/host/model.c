/**
 * @file stages/10_gpt2_e2e/host/model.c
 * @brief Binding GPT-2's weights (see model.h).
 */
#include "model.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

gpt2_config gpt2_config_124m(void)
{
    gpt2_config c = {50257, 1024, 12, 12, 768};
    return c;
}

/** The tensors of one model, in a fixed order: name (after the prefix), where its floats go, its shape. */
typedef struct {
    char name[64];      /**< e.g. "h.3.mlp.c_fc.weight" */
    const float **dst;  /**< the weights' pointer to set */
    int ndim;           /**< 1 or 2 */
    int64_t shape[2];   /**< its shape */
} tensor_slot;

static void add_slot(tensor_slot *s, int *k, const char *name, const float **dst, int ndim, int64_t s0, int64_t s1)
{
    snprintf(s[*k].name, sizeof s[*k].name, "%s", name);
    s[*k].dst = dst, s[*k].ndim = ndim, s[*k].shape[0] = s0, s[*k].shape[1] = s1;
    ++*k;
}

/** Lay the weights out in m->memory and list every tensor (caller frees the list). */
static tensor_slot *layout(gpt2_model *m, int *n_slots)
{
    const gpt2_config *c = &m->cfg;
    int64_t C = c->C, V = c->vocab, T = c->max_T;
    int n = 4 + 12 * c->n_layer + 2;
    tensor_slot *s = calloc((size_t)n, sizeof *s);
    m->blocks = calloc((size_t)c->n_layer, sizeof(gpt2_block));
    if (!s || !m->blocks) {
        free(s);
        return NULL;
    }
    int k = 0;
    add_slot(s, &k, "wte.weight", &m->w.wte, 2, V, C);
    add_slot(s, &k, "wpe.weight", &m->w.wpe, 2, T, C);
    for (int l = 0; l < c->n_layer; ++l) {
        gpt2_block *b = &m->blocks[l];
        const struct {
            const char *suffix;
            const float **field;
            int ndim;
            int64_t s0, s1;
        } parts[] = {{"ln_1.weight", &b->ln1_w, 1, C, 0},          {"ln_1.bias", &b->ln1_b, 1, C, 0},
                     {"attn.c_attn.weight", &b->qkv_w, 2, C, 3 * C}, {"attn.c_attn.bias", &b->qkv_b, 1, 3 * C, 0},
                     {"attn.c_proj.weight", &b->proj_w, 2, C, C},    {"attn.c_proj.bias", &b->proj_b, 1, C, 0},
                     {"ln_2.weight", &b->ln2_w, 1, C, 0},          {"ln_2.bias", &b->ln2_b, 1, C, 0},
                     {"mlp.c_fc.weight", &b->fc_w, 2, C, 4 * C},     {"mlp.c_fc.bias", &b->fc_b, 1, 4 * C, 0},
                     {"mlp.c_proj.weight", &b->fcproj_w, 2, 4 * C, C}, {"mlp.c_proj.bias", &b->fcproj_b, 1, C, 0}};
        for (size_t i = 0; i < sizeof parts / sizeof parts[0]; ++i) {
            char nm[64];
            snprintf(nm, sizeof nm, "h.%d.%s", l, parts[i].suffix);
            add_slot(s, &k, nm, parts[i].field, parts[i].ndim, parts[i].s0, parts[i].s1);
        }
    }
    add_slot(s, &k, "ln_f.weight", &m->w.lnf_w, 1, C, 0);
    add_slot(s, &k, "ln_f.bias", &m->w.lnf_b, 1, C, 0);
    *n_slots = k;
    size_t total = 0;
    for (int i = 0; i < k; ++i) total += (size_t)(s[i].shape[0] * (s[i].ndim == 2 ? s[i].shape[1] : 1));
    m->memory = malloc(total * sizeof(float));
    if (!m->memory) {
        free(s);
        return NULL;
    }
    m->n_params = total;
    float *p = m->memory;
    for (int i = 0; i < k; ++i) {
        *s[i].dst = p;
        p += s[i].shape[0] * (s[i].ndim == 2 ? s[i].shape[1] : 1);
    }
    m->w.blocks = m->blocks;
    return s;
}

static int64_t slot_numel(const tensor_slot *s) { return s->shape[0] * (s->ndim == 2 ? s->shape[1] : 1); }

static void shape_text(char *buf, size_t len, int ndim, const int64_t *shape)
{
    size_t n = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < ndim && n < len; ++i) n += (size_t)snprintf(buf + n, len - n, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (n < len) snprintf(buf + n, len - n, "]");
}

int gpt2_model_from_safetensors(const st_file *f, int n_head, gpt2_model *m, char *err, size_t err_len)
{
    memset(m, 0, sizeof *m);
    const char *prefix = st_find(f, "transformer.wte.weight") ? "transformer." : "";
    char name[ST_MAX_NAME + 16];
    snprintf(name, sizeof name, "%swte.weight", prefix);
    const st_tensor *wte = st_find(f, name);
    snprintf(name, sizeof name, "%swpe.weight", prefix);
    const st_tensor *wpe = st_find(f, name);
    if (!wte || wte->ndim != 2 || !wpe || wpe->ndim != 2) {
        snprintf(err, err_len, "missing or not 2-D: tensor '%s%s.weight' (is this a GPT-2 model.safetensors?)",
                 prefix, !wte || wte->ndim != 2 ? "wte" : "wpe");
        return -1;
    }
    gpt2_config *c = &m->cfg;
    c->vocab = (int)wte->shape[0], c->C = (int)wte->shape[1], c->max_T = (int)wpe->shape[0];
    if (wpe->shape[1] != c->C || c->C < 1 || c->vocab < 1 || c->max_T < 1 || wte->shape[0] > (1 << 24) ||
        wte->shape[1] > (1 << 16) || wpe->shape[0] > (1 << 20)) {
        snprintf(err, err_len, "tensors '%swte.weight' [%lld, %lld] and '%swpe.weight' [%lld, %lld] disagree or are too large",
                 prefix, (long long)wte->shape[0], (long long)wte->shape[1], prefix, (long long)wpe->shape[0],
                 (long long)wpe->shape[1]);
        return -1;
    }
    for (c->n_layer = 0;; c->n_layer++) {
        snprintf(name, sizeof name, "%sh.%d.ln_1.weight", prefix, c->n_layer);
        if (!st_find(f, name)) break;
    }
    if (c->n_layer == 0) {
        snprintf(err, err_len, "missing tensor '%sh.0.ln_1.weight': the model has no blocks", prefix);
        return -1;
    }
    c->n_head = n_head > 0 ? n_head : (c->C % 64 == 0 ? c->C / 64 : 0);
    if (c->n_head < 1 || c->C % c->n_head) {
        snprintf(err, err_len, "C = %d is not a multiple of %s", c->C, n_head > 0 ? "the head count" : "64 (pass the head count)");
        return -1;
    }
    int n_slots = 0;
    tensor_slot *slots = layout(m, &n_slots);
    if (!slots) {
        gpt2_model_free(m);
        snprintf(err, err_len, "out of host memory for %d layers of %d channels", c->n_layer, c->C);
        return -1;
    }
    int rc = 0;
    for (int i = 0; i < n_slots && rc == 0; ++i) {
        snprintf(name, sizeof name, "%s%s", prefix, slots[i].name);
        const st_tensor *t = st_find(f, name);
        if (!t) {
            snprintf(err, err_len, "missing tensor '%s'", name);
            rc = -1;
            break;
        }
        int same = t->ndim == slots[i].ndim;
        for (int d = 0; same && d < t->ndim; ++d) same = t->shape[d] == slots[i].shape[d];
        if (!same) {
            char got[96], want[96];
            shape_text(got, sizeof got, t->ndim, t->shape);
            shape_text(want, sizeof want, slots[i].ndim, slots[i].shape);
            snprintf(err, err_len, "tensor '%s' has shape %s, expected %s", name, got, want);
            rc = -1;
            break;
        }
        rc = st_read_f32(f, t, (float *)*slots[i].dst, err, err_len);
    }
    free(slots);
    if (rc) gpt2_model_free(m);
    return rc;
}

int gpt2_model_load(const char *path, int n_head, gpt2_model *m, char *err, size_t err_len)
{
    st_file f;
    memset(m, 0, sizeof *m);
    if (st_load(path, &f, err, err_len)) return -1;
    int rc = gpt2_model_from_safetensors(&f, n_head, m, err, err_len);
    st_free(&f);
    return rc;
}

/** splitmix64 → uniform in [−a, a]. */
static float uniform(uint64_t *s, float a)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return a * (float)(2.0 * ((double)(z >> 11) / 9007199254740992.0) - 1.0);
}

int gpt2_model_random(gpt2_model *m, const gpt2_config *cfg, uint64_t seed)
{
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    int n_slots;
    tensor_slot *slots = layout(m, &n_slots);
    if (!slots) {
        gpt2_model_free(m);
        return -1;
    }
    /* GPT-2's initialisation scale: std 0.02 for weights (uniform of that std), LayerNorm gains
     * near 1, small biases; the residual projections scaled down by √(2L) as GPT-2 does */
    uint64_t s = seed;
    float a = 0.02f * sqrtf(3.0f), proj = a / sqrtf(2.0f * cfg->n_layer);
    for (int i = 0; i < n_slots; ++i) {
        float *p = (float *)*slots[i].dst;
        const char *nm = slots[i].name;
        int is_ln_w = strstr(nm, "ln_") && strstr(nm, ".weight"), is_bias = strstr(nm, ".bias") != NULL;
        int is_proj = strstr(nm, "c_proj.weight") != NULL;
        for (int64_t k = 0; k < slot_numel(&slots[i]); ++k)
            p[k] = is_ln_w ? 1.0f + uniform(&s, 0.1f) : is_bias ? uniform(&s, 0.02f) : uniform(&s, is_proj ? proj : a);
    }
    free(slots);
    return 0;
}

void gpt2_model_free(gpt2_model *m)
{
    free(m->memory), free(m->blocks);
    memset(m, 0, sizeof *m);
}

int gpt2_model_write(const gpt2_model *m, const char *path, int with_prefix, char *err, size_t err_len)
{
    gpt2_model tmp = *m; /* layout() again, only for the names and shapes in the same order */
    tmp.memory = NULL, tmp.blocks = NULL;
    int n_slots;
    tensor_slot *slots = layout(&tmp, &n_slots);
    if (!slots) return snprintf(err, err_len, "out of host memory"), -1;
    const char *prefix = with_prefix ? "transformer." : "";
    size_t cap = 4096 + (size_t)n_slots * 160 + (size_t)m->cfg.n_layer * 200, n = 0;
    char *header = malloc(cap);
    int64_t T = m->cfg.max_T;
    uint64_t offset = 0;
    n += (size_t)snprintf(header + n, cap - n, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (int i = 0; i < n_slots; ++i) {
        uint64_t bytes = (uint64_t)slot_numel(&slots[i]) * 4;
        char shape[64];
        shape_text(shape, sizeof shape, slots[i].ndim, slots[i].shape);
        n += (size_t)snprintf(header + n, cap - n, ",\"%s%s\":{\"dtype\":\"F32\",\"shape\":%s,\"data_offsets\":[%llu,%llu]}",
                              prefix, slots[i].name, shape, (unsigned long long)offset, (unsigned long long)(offset + bytes));
        offset += bytes;
    }
    for (int l = 0; l < m->cfg.n_layer; ++l) { /* the causal-mask buffers Hugging Face saves; a loader must skip them */
        uint64_t bytes = (uint64_t)(T * T) * 4;
        n += (size_t)snprintf(header + n, cap - n,
                              ",\"%sh.%d.attn.bias\":{\"dtype\":\"F32\",\"shape\":[1,1,%lld,%lld],\"data_offsets\":[%llu,%llu]}",
                              prefix, l, (long long)T, (long long)T, (unsigned long long)offset,
                              (unsigned long long)(offset + bytes));
        offset += bytes;
    }
    n += (size_t)snprintf(header + n, cap - n, "}");
    while (n % 8) header[n++] = ' '; /* the data starts 8-byte aligned, as the format recommends */
    FILE *f = fopen(path, "wb");
    int ok = f != NULL;
    unsigned char len8[8];
    for (int i = 0; i < 8; ++i) len8[i] = (unsigned char)((uint64_t)n >> (8 * i));
    ok = ok && fwrite(len8, 1, 8, f) == 8 && fwrite(header, 1, n, f) == n;
    /* layout() puts the tensors one after another in this same order, so the weights are m->memory as is */
    ok = ok && fwrite(m->memory, 4, m->n_params, f) == m->n_params;
    float *mask = calloc((size_t)(T * T), 4);
    for (int64_t i = 0; mask && i < T; ++i)
        for (int64_t j = 0; j <= i; ++j) mask[i * T + j] = 1.0f;
    for (int l = 0; ok && mask && l < m->cfg.n_layer; ++l) ok = fwrite(mask, 4, (size_t)(T * T), f) == (size_t)(T * T);
    ok = ok && mask;
    if (f && fclose(f) != 0) ok = 0;
    free(mask), free(header), free(slots), free(tmp.memory), free(tmp.blocks);
    if (!ok) return snprintf(err, err_len, "cannot write '%s'", path), -1;
    return 0;
}

int gpt2_fold_layernorm(const float *w, const float *bias, const float *g, const float *b, int K, int N,
                        float (*round)(float), float *w_folded, float *bias_sums)
{
    double *sums = calloc((size_t)2 * N, sizeof *sums); /* [2][N]: Σ b_k·w_kn, then Σ w'_kn */
    if (!sums) return -1;
    for (int k = 0; k < K; ++k) /* row by row: w is [K][N] */
        for (int n = 0; n < N; ++n) {
            const float wkn = w[(size_t)k * N + n], folded = round ? round(g[k] * wkn) : g[k] * wkn;
            w_folded[(size_t)k * N + n] = folded;
            sums[n] += (double)b[k] * wkn;
            sums[N + n] += folded;
        }
    for (int n = 0; n < N; ++n) bias_sums[n] = (float)(bias[n] + sums[n]), bias_sums[N + n] = (float)sums[N + n];
    free(sums);
    return 0;
}
