/**
 * @file test_tokenizer_files.c
 * @brief Every malformed tokenizer file is refused with one line, and nothing
 *        goes wrong in memory on the way (this program is built with
 *        AddressSanitizer and UBSan: an overflow or a leak fails the test).
 *
 * Usage: test_tokenizer_files <good dir> <bad dir>. The good dir holds a valid
 * vocab.json and merges.txt; the bad dir the broken files made at configure
 * time (stages/10_gpt2_e2e/CMakeLists.txt): each vocab_*.json is tried with the
 * good merges.txt, each merges_*.txt with the good vocab.json.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"

static int failures;

static void expect_refused(const char *vocab, const char *merges)
{
    char err[512] = "";
    gpt2_tokenizer *t = tok_load(vocab, merges, err, sizeof err);
    if (t) {
        printf("FAIL: %s + %s was accepted\n", vocab, merges);
        tok_free(t);
        failures++;
    } else if (!err[0] || strchr(err, '\n')) {
        printf("FAIL: %s + %s: the reason is not one line: '%s'\n", vocab, merges, err);
        failures++;
    } else {
        printf("refused: %s\n", err);
    }
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s <dir with vocab.json and merges.txt> <dir with the broken files>\n", argv[0]);
        return 2;
    }
    char vocab[4096], merges[4096], path[4096], err[512];
    snprintf(vocab, sizeof vocab, "%s/vocab.json", argv[1]);
    snprintf(merges, sizeof merges, "%s/merges.txt", argv[1]);
    gpt2_tokenizer *t = tok_load(vocab, merges, err, sizeof err);
    if (!t) {
        printf("FAIL: the valid pair is refused: %s\n", err);
        return 1;
    }
    /* the valid pair works: "hello world" is two tokens and decodes back */
    int ids[16];
    char back[32];
    int n = tok_encode(t, "hello world", 11, ids, 16);
    long m = n > 0 ? tok_decode(t, ids, n, back, sizeof back) : -1;
    if (n != 2 || m != 11 || memcmp(back, "hello world", 11) != 0) {
        printf("FAIL: the valid pair encodes 'hello world' to %d tokens\n", n);
        failures++;
    }
    tok_free(t);

    DIR *d = opendir(argv[2]);
    if (!d) {
        printf("FAIL: cannot open %s\n", argv[2]);
        return 1;
    }
    int tried = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        snprintf(path, sizeof path, "%s/%s", argv[2], e->d_name);
        if (strncmp(e->d_name, "vocab_", 6) == 0) expect_refused(path, merges), tried++;
        if (strncmp(e->d_name, "merges_", 7) == 0) expect_refused(vocab, path), tried++;
    }
    closedir(d);
    expect_refused(vocab, "/no/such/merges.txt"), tried++;
    if (tried < 10) {
        printf("FAIL: only %d broken files found in %s\n", tried, argv[2]);
        failures++;
    }
    printf("%d broken inputs tried, %d failures\n", tried, failures);
    return failures ? 1 : 0;
}
