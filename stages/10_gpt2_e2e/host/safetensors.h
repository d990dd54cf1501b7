/**
 * @file stages/10_gpt2_e2e/host/safetensors.h
 * @brief Reading a safetensors file (Hugging Face's weight format) in C, as
 *        untrusted input.
 *
 * The format: 8 bytes, a little-endian u64 N; N bytes of JSON, an object that
 * maps each tensor's name to {"dtype": "F32", "shape": [..], "data_offsets":
 * [begin, end]} (plus an optional "__metadata__" object of strings); then the
 * data, the offsets counting from its first byte.
 *
 * Everything is checked before anything is used: the header length against the
 * file, the JSON's grammar (a small parser for exactly this subset, nesting
 * limited), each tensor's dtype, its offsets against the data (inside, in order,
 * no two overlapping) and its byte count against its shape. A bad file gives a
 * one-line message that names the tensor or the byte offset; nothing is read
 * out of bounds.
 */
#ifndef STAGE10_SAFETENSORS_H
#define STAGE10_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** @brief Element types of the format (the ones this loader knows). */
typedef enum { ST_F64, ST_F32, ST_F16, ST_BF16, ST_I64, ST_I32, ST_I16, ST_I8, ST_U8, ST_BOOL } st_dtype;

/** @brief Most dimensions a tensor may have. */
#define ST_MAX_DIMS 8
/** @brief Longest tensor name kept, bytes (longer names are an error). */
#define ST_MAX_NAME 256

/** @brief One tensor of the file. */
typedef struct {
    char name[ST_MAX_NAME];        /**< its name */
    st_dtype dtype;                /**< element type */
    int ndim;                      /**< dimensions */
    int64_t shape[ST_MAX_DIMS];    /**< sizes */
    uint64_t begin;                /**< first byte, from the start of the data */
    uint64_t end;                  /**< one past the last byte */
} st_tensor;

/** @brief A parsed file. `data` points into the caller's buffer (st_parse) or an owned one (st_load). */
typedef struct {
    uint8_t *owned;        /**< the whole file when st_load read it; NULL after st_parse */
    const uint8_t *data;   /**< the data section */
    size_t data_size;      /**< its bytes */
    st_tensor *tensors;    /**< the tensors, in file order */
    int n_tensors;         /**< how many */
} st_file;

/** @brief Bytes per element of a dtype. */
size_t st_dtype_size(st_dtype t);
/** @brief The format's name of a dtype ("F32"). */
const char *st_dtype_name(st_dtype t);

/**
 * @brief Parse a file already in memory.
 * @return 0, or −1 with a one-line reason in err
 */
int st_parse(const uint8_t *buf, size_t size, st_file *out, char *err, size_t err_len);

/** @brief Read and parse a file. @return 0, or −1 with a reason (including "cannot open") in err */
int st_load(const char *path, st_file *out, char *err, size_t err_len);

/** @brief Free what st_parse / st_load allocated. */
void st_free(st_file *f);

/** @brief The tensor named `name`, or NULL. */
const st_tensor *st_find(const st_file *f, const char *name);

/** @brief Elements of a tensor (product of its shape). */
int64_t st_numel(const st_tensor *t);

/**
 * @brief Read a tensor as fp32 (F32, F16 or BF16), converting as it goes.
 * @return 0, or −1 with a reason in err (another dtype)
 */
int st_read_f32(const st_file *f, const st_tensor *t, float *dst, char *err, size_t err_len);

#ifdef __cplusplus
}
#endif

#endif /* STAGE10_SAFETENSORS_H */
