/* tokenizer_internal.h - what tokenizer.c (loading, public API),
 * tokenizer_pre.c (normalizers and pre-tokenizers) and tokenizer_bpe.c (the
 * merge loop) share. Not for use outside the tokenizer_* files.
 *
 * A loaded tokenizer is immutable; every encode call works in its own
 * scratch memory, which is what makes one tokenizer safe to share between
 * threads.
 */
#ifndef ALALLO_TRAIN_TOKENIZER_INTERNAL_H
#define ALALLO_TRAIN_TOKENIZER_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stddef.h>
#include <stdint.h>

#define TOK_MAX_INPUT ((size_t)64 << 20) /* tokenizer.h: input over 64 MiB fails */
#define TOK_MAX_VOCAB (1 << 22)          /* 4M ids: far above any real vocabulary */
#define TOK_MAX_STEPS 16                 /* normalizer / pre-tokenizer steps */

/* ---- string -> id, open addressing ---------------------------------- */
struct tok_map {
    struct tok_map_slot {
        const char *key; /* not owned: points into tokenizer's strings */
        uint32_t len;
        int32_t id;
    } *slots;
    size_t cap; /* power of two, or 0 */
    size_t n;
};

int tok_map_init(struct tok_map *m, size_t expected);
void tok_map_free(struct tok_map *m);
/* Inserts or replaces. -1 on allocation failure. */
int tok_map_put(struct tok_map *m, const char *key, size_t len, int32_t id);
int32_t tok_map_get(const struct tok_map *m, const char *key, size_t len); /* -1 if absent */

/* ---- (left id, right id) -> (rank, merged id) ----------------------- */
struct tok_pairs {
    struct tok_pair_slot {
        uint64_t key; /* (left << 32 | right) + 1, so that 0 means empty */
        int32_t rank;
        int32_t merged;
    } *slots;
    size_t cap;
    size_t n;
};

int tok_pairs_init(struct tok_pairs *p, size_t expected);
void tok_pairs_free(struct tok_pairs *p);
int tok_pairs_put(struct tok_pairs *p, int32_t a, int32_t b, int32_t rank, int32_t merged);
/* 0 and *rank, *merged when the pair merges; -1 otherwise. */
int tok_pairs_get(const struct tok_pairs *p, int32_t a, int32_t b, int32_t *rank, int32_t *merged);

/* ---- pipeline steps ----------------------------------------------------- */
enum tok_norm_kind { NORM_PREPEND, NORM_REPLACE };

struct tok_norm {
    enum tok_norm_kind kind;
    char *a; /* PREPEND: the text; REPLACE: what to find */
    char *b; /* REPLACE: what to put instead */
};

enum tok_pre_kind { PRE_SPLIT, PRE_BYTELEVEL, PRE_METASPACE };

enum tok_split_behavior { SPLIT_ISOLATED, SPLIT_REMOVED, SPLIT_MERGED_PREV, SPLIT_MERGED_NEXT };

enum tok_prepend { PREPEND_ALWAYS, PREPEND_FIRST, PREPEND_NEVER };

struct tok_pre {
    enum tok_pre_kind kind;
    pcre2_code *re; /* SPLIT, and BYTELEVEL with use_regex */
    enum tok_split_behavior behavior;
    int add_prefix_space;  /* BYTELEVEL */
    char replacement[8];   /* METASPACE, UTF-8 of one character */
    enum tok_prepend prepend;
    int split;             /* METASPACE */
};

/* A list of byte strings (pre-tokens), all stored in one buffer. */
struct tok_pieces {
    char *buf;
    size_t len, cap;
    size_t *off, *plen;
    size_t n, ncap;
};

void tok_pieces_free(struct tok_pieces *p);
void tok_pieces_clear(struct tok_pieces *p);
int tok_pieces_add(struct tok_pieces *p, const char *s, size_t len);
/* Appends to the last piece (a new one when there is none). */
int tok_pieces_extend(struct tok_pieces *p, const char *s, size_t len);

/* ---- the tokenizer -------------------------------------------------------- */
enum tok_kind { TOK_BYTE_LEVEL, TOK_SENTENCEPIECE };

struct tok_added {
    char *content;
    size_t len;
    int32_t id;
    int special;
};

struct tokenizer {
    enum tok_kind kind;
    int32_t n_ids;      /* largest id + 1 */
    char **str;         /* (n_ids) token text as in the file, or NULL for holes */
    uint32_t *str_len;  /* (n_ids) */
    uint8_t *added_kind; /* (n_ids) 0 vocab, 1 added, 2 added special */
    struct tok_map vocab;
    struct tok_pairs merges;
    int has_merges;    /* 0: a pair merges when its concatenation is a token (rank = its id) */
    int ignore_merges; /* a whole pre-token found in the vocabulary is one token */
    int byte_fallback;
    int fuse_unk;
    int32_t unk_id;
    int32_t byte_id[256]; /* byte-level: id of each byte's character; SP: <0xNN>; -1 */

    struct tok_norm norm[TOK_MAX_STEPS];
    int n_norm;
    struct tok_pre pre[TOK_MAX_STEPS];
    int n_pre;

    struct tok_added *added; /* sorted longest first, for greedy matching */
    size_t n_added;
    uint8_t added_first[256]; /* 1 when some added token starts with this byte */

    int32_t bos, eos;

    char byte_str[256][4];     /* UTF-8 of each byte's GPT-2 character */
    uint8_t byte_str_len[256];
    int16_t char_byte[256 + 68]; /* inverse, by code point */

    int dec_byte_level;    /* map characters back to bytes */
    int dec_metaspace;     /* replace the metaspace character with ' ' */
    char dec_meta[8];
    int dec_strip_first;   /* drop one leading space of the decoded text */
    int dec_byte_fallback; /* <0xNN> tokens are raw bytes */
};

/* GPT-2's byte <-> printable character table. */
uint32_t tok_byte_char(uint8_t b);
int tok_char_byte(uint32_t cp); /* -1 when cp is not in the table */

/* UTF-8 helpers: length of the sequence starting at s (1 for an invalid
 * byte), and encoding of one code point (returns bytes written, <= 4). */
size_t tok_utf8_len(const unsigned char *s, size_t avail);
size_t tok_utf8_put(uint32_t cp, char *out);
uint32_t tok_utf8_get(const unsigned char *s, size_t n); /* n from tok_utf8_len */

/* Normalizes and pre-tokenizes one segment of text (between added tokens).
 * `first` is 1 for the segment that starts the text. */
int tok_pre_run(const struct tokenizer *t, const char *text, size_t len, int first,
                struct tok_pieces *out, struct tok_pieces *scratch);
void tok_pre_free(struct tok_pre *p);

/* Per-call scratch for the BPE merge of one pre-token. */
struct tok_bpe_work;
struct tok_bpe_work *tok_bpe_work_new(void);
void tok_bpe_work_free(struct tok_bpe_work *w);

/* Appends the ids of one pre-token to *ids (grown with realloc). */
int tok_bpe_piece(const struct tokenizer *t, struct tok_bpe_work *w, const char *s, size_t len,
                  int32_t **ids, size_t *n, size_t *cap);

#endif
