/**
 * @file dtype.h
 * @brief The element types the stages work in. Math inside kernels is fp32 unless
 *        a stage says otherwise; fp16 is a storage type that halves the bytes moved.
 */
#ifndef WB_DTYPE_H
#define WB_DTYPE_H

#include <stddef.h>

/** @brief Storage type of an array. */
typedef enum {
    WB_F32, /**< IEEE binary32, 4 bytes */
    WB_F16  /**< IEEE binary16, 2 bytes (carried as uint16_t on the host) */
} wb_dtype;

/** @brief Bytes of one element. */
static inline size_t wb_dtype_bytes(wb_dtype t) { return t == WB_F16 ? 2 : 4; }
/** @brief "fp32" or "fp16". */
static inline const char *wb_dtype_name(wb_dtype t) { return t == WB_F16 ? "fp16" : "fp32"; }

#endif /* WB_DTYPE_H */
