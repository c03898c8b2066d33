// The Heftfile's generic syntax: tokens, directives and blocks, before any
// meaning is given to them (Caddyfile rules). Used by the parser (heftfile.cc)
// and by `heft fmt`, which prints the tree back in canonical form.
//
// Lexical rules: tokens are separated by spaces or tabs; a newline ends a
// directive; `"..."` quotes a token (escapes \" and \\); `#` starting a token
// comments out the rest of the line; a lone `{` opens a block, a lone `}`
// closes it. A UTF-8 byte order mark starting the text is skipped. Positions
// are 1-based lines and byte columns (a tab counts 1; the mark counts 0).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/model.h"

namespace heft::config::syntax {

struct Token {
  std::string text;  // unquoted, unescaped
  int line = 0;
  int column = 0;
  bool quoted = false;
};

// One line of the file: a directive with arguments and an optional block, or
// a comment on a line of its own.
struct Directive {
  bool is_comment = false;  // name.text is then the whole comment, "#" included
  Token name;               // empty text for a bare `{` block (the global options)
  std::vector<Token> args;
  bool has_block = false;
  Token open_brace;  // where the block's `{` is
  std::vector<Directive> block;
  std::string open_comment;        // "# ..." after the block's `{` on its line: `site {  # note`
  std::string trailing_comment;    // "# ..." after the directive on the same line (after a block's `}`)
  bool blank_line_before = false;  // an empty line separated it from the previous one
};

struct Tree {
  std::vector<Directive> top;
};

// Lexes and groups `text`. Every syntax error is reported (unterminated
// quote, unbalanced braces); the tree holds what could be read.
Result<Tree> parse(std::string_view text, std::string_view file);

// An environment variable's value, or nullopt when it is not set.
using EnvironmentLookup = std::function<std::optional<std::string>(const std::string& name)>;

// Replaces `{$NAME}` and `{$NAME:default}` in every token of the tree (names
// and arguments, quoted or not) with the environment variable NAME, or with
// the default when NAME is not set — Caddy's and HAProxy's parse-time
// environment placeholders, so secrets such as admin_token need not be in the
// file. Within one token, so positions stay true. A variable not set and
// without a default (`{$NAME:}` is an empty default), a name that is not one
// ([A-Za-z_][A-Za-z0-9_]*) or an unclosed `{$` is an error at its place.
// `heft fmt` does not call this: it keeps the placeholders as written.
void expand_environment(Tree& tree, std::string_view file, const EnvironmentLookup& lookup,
                        std::vector<Diagnostic>& errors);

// Prints the tree: tab indentation, one directive per line, single spaces,
// quotes only where needed, at most one blank line in a row, a blank line
// between top-level blocks. Comments are kept.
std::string format(const Tree& tree);

// The token as it must be written to read back the same (quoted if needed).
std::string quote_if_needed(std::string_view text);

}  // namespace heft::config::syntax
