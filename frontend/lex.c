/*
 * lex.c - the tokenizer of the .ir text format.
 *
 * Any byte sequence is accepted as input: NUL bytes and binary garbage give a
 * TK_ERROR token, never a crash. Lines and columns are 1-based; a column
 * counts bytes, which is what the caret line of a diagnostic needs.
 */
#include "lex.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

typedef struct Lexer {
    fc_context *ctx;
    const char *p, *end;
    int line, col;
    fc_tokens *out;
    int cap;
} Lexer;

static bool is_digit(int c) { return c >= '0' && c <= '9'; }
static bool is_alpha(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
/* Characters of a value name after '%'; also what may not follow a number. */
static bool is_value_char(int c) { return is_alpha(c) || is_digit(c) || c == '.'; }

static int peek(const Lexer *L, size_t i) {
    return L->p + i < L->end ? (unsigned char)L->p[i] : -1;
}

/* Step over n bytes of the current line (never a newline). Columns saturate
 * instead of overflowing on absurdly long lines. */
static void advance(Lexer *L, size_t n) {
    L->p += n;
    L->col = (size_t)L->col + n > INT_MAX ? INT_MAX : L->col + (int)n;
}

static bool push(Lexer *L, fc_tok_kind kind, const char *s, size_t len, fc_loc loc) {
    fc_tokens *t = L->out;
    if (t->n == L->cap) {
        if (L->cap > INT_MAX / 2) {
            fc_set_error(L->ctx, FC_ERR_NOMEM, "out of memory (too many tokens)");
            return false;
        }
        int cap = L->cap ? L->cap * 2 : 256;
        fc_token *tok = fc_ctx_realloc(L->ctx, t->tok, (size_t)cap * sizeof *tok);
        if (!tok) return false;
        t->tok = tok;
        L->cap = cap;
    }
    t->tok[t->n++] = (fc_token){kind, s, len, loc};
    return true;
}

/* Record the one lexical error as a TK_ERROR token at loc; the lexer stops
 * after it. */
static bool lex_error(Lexer *L, fc_loc loc, const char *msg) {
    snprintf(L->out->error, sizeof L->out->error, "%s", msg);
    return push(L, TK_ERROR, L->p, 0, loc);
}

/* Length of the word starting at p[i] (identifier characters). */
static size_t word_len(const Lexer *L, size_t i) {
    size_t n = 0;
    while (is_value_char(peek(L, i + n))) n++;
    return n;
}

static bool word_is(const Lexer *L, size_t i, const char *w) {
    size_t n = strlen(w);
    return word_len(L, i) == n && (size_t)(L->end - L->p) >= i + n && memcmp(L->p + i, w, n) == 0;
}

/*
 * A number: '-'? digits ('.' digits*)? ([eE] [+-]? digits)?, or -inf / -nan
 * (plain inf and nan lex as names; the parser reads them as numbers where a
 * number may stand). Returns the token kind, or TK_ERROR if malformed.
 */
static fc_tok_kind scan_number(const Lexer *L, size_t *len) {
    size_t i = 0;
    if (peek(L, 0) == '-') {
        i = 1;
        if (word_is(L, 1, "inf") || word_is(L, 1, "nan")) {
            *len = 4;
            return TK_FLOAT;
        }
    }
    fc_tok_kind kind = TK_INT;
    while (is_digit(peek(L, i))) i++;
    if (peek(L, i) == '.') {
        kind = TK_FLOAT;
        i++;
        while (is_digit(peek(L, i))) i++;
    }
    if (peek(L, i) == 'e' || peek(L, i) == 'E') {
        size_t j = i + 1;
        if (peek(L, j) == '+' || peek(L, j) == '-') j++;
        if (is_digit(peek(L, j))) {
            while (is_digit(peek(L, j))) j++;
            i = j;
            kind = TK_FLOAT;
        }
    }
    *len = i;
    /* "12abc", "1.2.3", "1e": one malformed literal, not two tokens. */
    if (is_value_char(peek(L, i))) {
        *len = i + word_len(L, i);
        return TK_ERROR;
    }
    return kind;
}

fc_status fc_lex(fc_context *ctx, const char *text, size_t len, fc_tokens *out) {
    memset(out, 0, sizeof *out);
    if (!text) text = ""; /* pointer arithmetic on NULL is undefined, even + 0 */
    Lexer L = {ctx, text, text + len, 1, 1, out, 0};

    for (;;) {
        int c = peek(&L, 0);
        fc_loc loc = {L.line, L.col};
        if (c < 0) break;

        if (c == '\n') {
            L.p++;
            L.line = L.line < INT_MAX ? L.line + 1 : INT_MAX;
            L.col = 1;
            continue;
        }
        if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
            advance(&L, 1);
            continue;
        }
        if (c == '#') {
            while (peek(&L, 0) >= 0 && peek(&L, 0) != '\n') advance(&L, 1);
            continue;
        }
        if (c != 0 && strchr("(){}[],=:", c)) { /* strchr would match the NUL byte */
            if (!push(&L, TK_PUNCT, L.p, 1, loc)) goto oom;
            advance(&L, 1);
            continue;
        }
        if (c == '%') {
            size_t n = word_len(&L, 1);
            if (n == 0) {
                if (!lex_error(&L, loc, "expected a value name after '%'")) goto oom;
                break;
            }
            if (!push(&L, TK_VALUE, L.p, n + 1, loc)) goto oom;
            advance(&L, n + 1);
            continue;
        }
        if (is_alpha(c)) {
            size_t n = 1;
            while (is_alpha(peek(&L, n)) || is_digit(peek(&L, n))) n++;
            if (!push(&L, TK_NAME, L.p, n, loc)) goto oom;
            advance(&L, n);
            continue;
        }
        if (is_digit(c) || (c == '-' && (is_digit(peek(&L, 1)) || word_is(&L, 1, "inf") || word_is(&L, 1, "nan")))) {
            size_t n;
            fc_tok_kind kind = scan_number(&L, &n);
            if (kind == TK_ERROR) {
                char msg[80];
                snprintf(msg, sizeof msg, "invalid number '%.*s%s'", n > 32 ? 32 : (int)n, L.p, n > 32 ? "..." : "");
                if (!lex_error(&L, loc, msg)) goto oom;
                break;
            }
            if (!push(&L, kind, L.p, n, loc)) goto oom;
            advance(&L, n);
            continue;
        }
        if (c == '"') {
            /* Strings stay on one line; a backslash escapes the next byte. */
            size_t n = 1;
            for (;;) {
                int d = peek(&L, n);
                if (d < 0 || d == '\n') {
                    if (!lex_error(&L, loc, "unterminated string")) goto oom;
                    goto done;
                }
                n++;
                if (d == '"') break;
                if (d == '\\' && peek(&L, n) >= 0 && peek(&L, n) != '\n') n++;
            }
            if (!push(&L, TK_STRING, L.p, n, loc)) goto oom;
            advance(&L, n);
            continue;
        }
        {
            char msg[40];
            if (c > 0x20 && c < 0x7f) snprintf(msg, sizeof msg, "unexpected character '%c'", c);
            else snprintf(msg, sizeof msg, "unexpected byte 0x%02x", c);
            if (!lex_error(&L, loc, msg)) goto oom;
            break;
        }
    }
done:
    if (push(&L, TK_EOF, L.p, 0, (fc_loc){L.line, L.col})) return FC_OK;
oom:
    fc_tokens_free(ctx, out);
    return FC_ERR_NOMEM;
}

void fc_tokens_free(fc_context *ctx, fc_tokens *t) {
    fc_ctx_freemem(ctx, t->tok);
    t->tok = NULL;
    t->n = 0;
}

bool fc_tok_is_word(const fc_token *t, const char *word) {
    size_t n = strlen(word);
    return t->kind == TK_NAME && t->len == n && memcmp(t->s, word, n) == 0;
}

void fc_tok_describe(const fc_token *t, char *buf, size_t n) {
    if (t->kind == TK_EOF) {
        snprintf(buf, n, "end of file");
        return;
    }
    char text[40];
    size_t len = t->len > 32 ? 32 : t->len;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)t->s[i];
        text[i] = c < 0x20 || c == 0x7f ? '?' : (char)c;
    }
    text[len] = 0;
    snprintf(buf, n, "'%s%s'", text, t->len > 32 ? "..." : "");
}
