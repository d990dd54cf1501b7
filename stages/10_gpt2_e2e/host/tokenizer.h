/**
 * @file stages/10_gpt2_e2e/host/tokenizer.h
 * @brief GPT-2's byte-level BPE tokenizer in C: encode text to token ids and
 *        decode ids to text, from the `vocab.json` and `merges.txt` of a
 *        Hugging Face download.
 *
 * Byte-level: every byte is a token of its own before any merge, so any input
 * (any UTF-8, any binary) encodes, and decode(encode(s)) == s. The files write
 * tokens with GPT-2's byte-to-character map (byte 0x20, a space, is 'Ġ'); the
 * tokenizer keeps them as plain bytes. Text is first split with GPT-2's pattern
 * ('s 't 're 've 'm 'll 'd, an optional space then letters, or digits, or other
 * symbols, and whitespace); bytes of non-ASCII characters count as letters (the
 * pattern's \\p{L} without a Unicode table: exact for ASCII and for letters of
 * other scripts, approximate for non-ASCII punctuation).
 */
#ifndef STAGE10_TOKENIZER_H
#define STAGE10_TOKENIZER_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/** @brief A loaded tokenizer (opaque). */
typedef struct gpt2_tokenizer gpt2_tokenizer;

/**
 * @brief Load vocab.json and merges.txt. Both are untrusted input: a file that
 *        is not what GPT-2 ships is refused with a reason, never half-loaded.
 *
 * Refused: a missing, empty or truncated file; JSON that is not one object of
 * "token": id pairs (bad escapes, text after the object, ids above 2^20 − 1, an
 * id twice); a token with a character outside GPT-2's byte map; a vocabulary
 * without all 256 single bytes; a merges line that is not two tokens separated
 * by one space, or whose tokens (or their join) are not in the vocabulary; a
 * merges file with no merges.
 * @return the tokenizer, or NULL with a one-line reason in err
 */
gpt2_tokenizer *tok_load(const char *vocab_json, const char *merges_txt, char *err, size_t err_len);

/**
 * @brief tok_load from bytes in memory (the fuzz target's way in): the same
 *        checks, with the files named "vocab.json" and "merges.txt" in messages.
 */
gpt2_tokenizer *tok_load_memory(const char *vocab_json, size_t vocab_len, const char *merges_txt, size_t merges_len,
                                char *err, size_t err_len);

/**
 * @brief Where `len` bytes stop being UTF-8 (for a prompt typed by a person).
 * @return the offset of the first byte of the first invalid sequence, or −1 when all is valid UTF-8
 */
long tok_utf8_error(const char *text, size_t len);

/** @brief Free it. */
void tok_free(gpt2_tokenizer *t);

/** @brief Tokens in the vocabulary (the largest id + 1). */
int tok_vocab_size(const gpt2_tokenizer *t);

/**
 * @brief Encode `len` bytes of text.
 * @param t       the tokenizer
 * @param text    the bytes
 * @param len     how many
 * @param max_ids room in ids
 * @param ids     receives at most max_ids ids
 * @return how many ids the text needs (may exceed max_ids: call again with more room), or −1 when a
 *         byte has no token (a vocabulary without all 256 bytes)
 */
int tok_encode(const gpt2_tokenizer *t, const char *text, size_t len, int *ids, int max_ids);

/**
 * @brief Decode ids to bytes.
 * @param t   the tokenizer
 * @param ids the ids
 * @param n   how many
 * @param cap room in out
 * @param out receives at most cap bytes (not NUL-terminated)
 * @return the bytes the ids decode to (may exceed cap), or −1 for an id outside the vocabulary
 */
long tok_decode(const gpt2_tokenizer *t, const int *ids, int n, char *out, size_t cap);

#ifdef __cplusplus
}
#endif

#endif /* STAGE10_TOKENIZER_H */
