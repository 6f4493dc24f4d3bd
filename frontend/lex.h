/*
 * lex.h - the tokenizer of the .ir text format (internal to frontend/).
 *
 * The whole text is tokenized up front into one array ending in TK_EOF.
 * A lexical error does not stop the caller at once: the lexer emits one
 * TK_ERROR token (its message is kept in the token list) followed by TK_EOF,
 * so the parser reports whichever error comes first in the file.
 */
#ifndef FC_FRONTEND_LEX_H
#define FC_FRONTEND_LEX_H

#include "ir.h"

typedef enum fc_tok_kind {
    TK_EOF,
    TK_ERROR,  /* a lexical error; see fc_tokens.error */
    TK_PUNCT,  /* one of ( ) { } [ ] , = : */
    TK_VALUE,  /* %name, text includes the '%' */
    TK_NAME,   /* identifier; also keywords and the numbers inf and nan */
    TK_INT,    /* integer literal, optional leading '-' */
    TK_FLOAT,  /* literal with '.', an exponent, or -inf / -nan */
    TK_STRING, /* "...", text includes the quotes */
} fc_tok_kind;

typedef struct fc_token {
    fc_tok_kind kind;
    const char *s; /* points into the source text (not NUL-terminated) */
    size_t len;
    fc_loc loc;    /* 1-based line and byte column of the first character */
} fc_token;

typedef struct fc_tokens {
    fc_token *tok; /* n tokens, the last one TK_EOF */
    int n;
    char error[160]; /* message of the TK_ERROR token, if any */
} fc_tokens;

/*
 * Tokenize text[0..len). Returns FC_OK or FC_ERR_NOMEM (error recorded on
 * ctx); lexical errors are not failures here (see TK_ERROR above).
 * Free the result with fc_tokens_free.
 */
fc_status fc_lex(fc_context *ctx, const char *text, size_t len, fc_tokens *out);
void fc_tokens_free(fc_context *ctx, fc_tokens *t);

/* Token tests used by the parser. */
static inline bool fc_tok_is_punct(const fc_token *t, char c) { return t->kind == TK_PUNCT && t->s[0] == c; }
bool fc_tok_is_word(const fc_token *t, const char *word); /* a TK_NAME spelled `word` */

/*
 * Describe a token for "expected X but found Y" messages: "end of file",
 * or the quoted text, cut short and with control bytes shown as '?'.
 */
void fc_tok_describe(const fc_token *t, char *buf, size_t n);

#endif
