// The Heftfile's generic syntax: see syntax.h.
#include "config/syntax.h"

#include <algorithm>

#include <fmt/format.h>

#include "config/values.h"

namespace heft::config::syntax {
namespace {

enum class Kind { word, open, close, newline, comment, end };

struct Lexeme {
  Kind kind;
  Token token;
};

constexpr std::string_view kUtf8Bom = "\xEF\xBB\xBF";

class Lexer {
 public:
  Lexer(std::string_view text, std::string_view file, std::vector<Diagnostic>& errors)
      : text_(text), file_(file), errors_(errors) {}

  std::vector<Lexeme> run() {
    std::vector<Lexeme> out;
    // Editors on Windows may start a UTF-8 file with a byte order mark; Caddy's
    // lexer skips it too. Columns on line 1 count from after it.
    if (text_.starts_with(kUtf8Bom)) pos_ = kUtf8Bom.size();
    while (pos_ < text_.size()) {
      char c = text_[pos_];
      if (c == ' ' || c == '\t' || c == '\r') {
        advance();
      } else if (c == '\n') {
        out.push_back({Kind::newline, {"", line_, column_, false}});
        advance();
      } else if (c == '#') {
        Token t{"", line_, column_, false};
        while (pos_ < text_.size() && text_[pos_] != '\n') t.text += advance();
        while (!t.text.empty() && (t.text.back() == '\r' || t.text.back() == ' ' || t.text.back() == '\t'))
          t.text.pop_back();
        out.push_back({Kind::comment, t});
      } else if (c == '"') {
        out.push_back({Kind::word, quoted()});
      } else {
        Token t{"", line_, column_, false};
        while (pos_ < text_.size() && !is_space(text_[pos_])) t.text += advance();
        Kind kind = t.text == "{" ? Kind::open : t.text == "}" ? Kind::close : Kind::word;
        out.push_back({kind, t});
      }
    }
    out.push_back({Kind::end, {"", line_, column_, false}});
    return out;
  }

 private:
  static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

  char advance() {
    char c = text_[pos_++];
    if (c == '\n') {
      ++line_;
      column_ = 1;
    } else {
      ++column_;
    }
    return c;
  }

  Token quoted() {
    Token t{"", line_, column_, true};
    advance();  // opening quote
    while (pos_ < text_.size()) {
      char c = advance();
      if (c == '"') return t;
      if (c == '\\' && pos_ < text_.size() && (text_[pos_] == '"' || text_[pos_] == '\\')) c = advance();
      t.text += c;
    }
    errors_.push_back({std::string(file_), t.line, t.column, "", "unterminated quoted string"});
    return t;
  }

  std::string_view text_;
  std::string_view file_;
  std::vector<Diagnostic>& errors_;
  size_t pos_ = 0;
  int line_ = 1;
  int column_ = 1;
};

class Grouper {
 public:
  Grouper(std::vector<Lexeme> lexemes, std::string_view file, std::vector<Diagnostic>& errors)
      : lexemes_(std::move(lexemes)), file_(file), errors_(errors) {}

  std::vector<Directive> block(const Token* open) {
    std::vector<Directive> out;
    int newlines = 0;
    for (;;) {
      const Lexeme& lx = lexemes_[pos_];
      switch (lx.kind) {
        case Kind::newline:
          ++newlines;
          ++pos_;
          break;
        case Kind::end:
          if (open)
            error(open->line, open->column, "missing '}' to close this block");
          return out;
        case Kind::close:
          if (open) {
            ++pos_;
            return out;
          }
          error(lx.token.line, lx.token.column, "unexpected '}' without an open block");
          ++pos_;
          break;
        case Kind::comment: {
          Directive d;
          d.is_comment = true;
          d.name = lx.token;
          d.blank_line_before = newlines >= 2;
          newlines = 0;
          out.push_back(std::move(d));
          ++pos_;
          break;
        }
        case Kind::open:
        case Kind::word: {
          Directive d = directive();
          d.blank_line_before = newlines >= 2;
          newlines = 0;
          out.push_back(std::move(d));
          break;
        }
      }
    }
  }

 private:
  Directive directive() {
    Directive d;
    const Lexeme& first = lexemes_[pos_];
    if (first.kind == Kind::word) {
      d.name = first.token;
      ++pos_;
    } else {
      d.name = Token{"", first.token.line, first.token.column, false};
    }
    for (;;) {
      const Lexeme& lx = lexemes_[pos_];
      if (lx.kind == Kind::word) {
        d.args.push_back(lx.token);
        ++pos_;
      } else if (lx.kind == Kind::open) {
        d.has_block = true;
        d.open_brace = lx.token;
        ++pos_;
        // A comment right after `{` is on its line: it stays there, rather
        // than becoming the block's first line.
        if (lexemes_[pos_].kind == Kind::comment) d.open_comment = lexemes_[pos_++].token.text;
        if (depth_ == kMaxDepth) {
          error(lx.token.line, lx.token.column,
                fmt::format("blocks nested more than {} deep (a Heftfile needs 3)", kMaxDepth));
          skip_block();
        } else {
          ++depth_;
          d.block = block(&d.open_brace);
          --depth_;
        }
        if (lexemes_[pos_].kind == Kind::comment) d.trailing_comment = lexemes_[pos_++].token.text;
        return d;
      } else if (lx.kind == Kind::comment) {
        d.trailing_comment = lx.token.text;
        ++pos_;
        return d;
      } else {
        return d;  // newline, `}` or end: the parent consumes it
      }
    }
  }

  void error(int line, int column, std::string message) {
    errors_.push_back({std::string(file_), line, column, "", std::move(message)});
  }

  // Past the `}` closing the block just opened (or to the end), without
  // recursing: the nesting that got here is already too deep.
  void skip_block() {
    for (size_t open = 1; open > 0 && lexemes_[pos_].kind != Kind::end; ++pos_) {
      if (lexemes_[pos_].kind == Kind::open) ++open;
      if (lexemes_[pos_].kind == Kind::close) --open;
    }
  }

  // The parser recurses per block: a bound keeps 40,000 nested braces (80 KB,
  // within the admin API's 1 MiB) from overflowing the stack of a running heft.
  static constexpr int kMaxDepth = 32;
  int depth_ = 0;
  std::vector<Lexeme> lexemes_;
  size_t pos_ = 0;
  std::string_view file_;
  std::vector<Diagnostic>& errors_;
};

void print(const std::vector<Directive>& directives, int depth, std::string& out) {
  std::string indent(depth, '\t');
  for (size_t i = 0; i < directives.size(); ++i) {
    const Directive& d = directives[i];
    bool after_block = i > 0 && directives[i - 1].has_block && depth == 0;
    if (i > 0 && (d.blank_line_before || after_block)) out += '\n';
    out += indent;
    if (d.is_comment) {
      out += d.name.text;
    } else {
      // Only an unquoted empty name is the bare `{` of an options block; `"" {` keeps its quotes.
      std::string line = d.name.text.empty() && !d.name.quoted && d.has_block ? "" : quote_if_needed(d.name.text);
      for (const Token& arg : d.args) {
        if (!line.empty()) line += ' ';
        line += quote_if_needed(arg.text);
      }
      if (d.has_block) line += line.empty() ? "{" : " {";
      if (!d.open_comment.empty()) line += " " + d.open_comment;
      out += line;
    }
    if (!d.has_block && !d.trailing_comment.empty()) out += " " + d.trailing_comment;
    out += '\n';
    if (d.has_block) {
      print(d.block, depth + 1, out);
      out += indent + "}";
      if (!d.trailing_comment.empty()) out += " " + d.trailing_comment;
      out += '\n';
    }
  }
}

}  // namespace

std::string quote_if_needed(std::string_view text) {
  // A leading byte order mark would be skipped when it starts the file (the first site's address).
  bool needs = text.empty() || text == "{" || text == "}" || text.front() == '#' || text.front() == '"' ||
               text.starts_with(kUtf8Bom);
  for (char c : text)
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') needs = true;
  if (!needs) return std::string(text);
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  out += '"';
  return out;
}

Result<Tree> parse(std::string_view text, std::string_view file) {
  Result<Tree> result;
  Lexer lexer(text, file, result.errors);
  std::vector<Lexeme> lexemes = lexer.run();
  // An unterminated quote swallows the rest of the file: brace errors after it are noise.
  std::vector<Diagnostic> structure_errors;
  Grouper grouper(std::move(lexemes), file, structure_errors);
  Tree tree;
  tree.top = grouper.block(nullptr);
  if (result.errors.empty()) result.errors = std::move(structure_errors);
  result.value = std::move(tree);
  return result;
}

namespace {

bool is_name_start(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || (c >= '0' && c <= '9'); }

void expand_token(Token& token, std::string_view file, const EnvironmentLookup& lookup,
                  std::vector<Diagnostic>& errors) {
  if (token.text.find("{$") == std::string::npos) return;
  // At the token's own place, so the parser's error for the token left as
  // written is recognised as this one's and dropped (parse_heftfile()).
  const auto fail = [&](std::string message) {
    errors.push_back({std::string(file), token.line, token.column, "", std::move(message)});
  };
  std::string out;
  std::size_t pos = 0;
  while (pos < token.text.size()) {
    const std::size_t open = token.text.find("{$", pos);
    if (open == std::string::npos) break;
    out.append(token.text, pos, open - pos);
    const std::size_t close = token.text.find('}', open);
    if (close == std::string::npos) {
      fail("unclosed environment placeholder \"{$\" (write {$NAME} or {$NAME:default})");
      return;
    }
    const std::string_view inside = std::string_view(token.text).substr(open + 2, close - open - 2);
    const std::size_t colon = inside.find(':');
    const std::string name(inside.substr(0, colon));
    if (name.empty() || !is_name_start(name[0]) ||
        !std::all_of(name.begin(), name.end(), [](char c) { return is_name_char(c); })) {
      fail(fmt::format("\"{}\" is not an environment variable name (letters, digits and _, not starting "
                       "with a digit)", printable(name)));
      return;
    }
    if (std::optional<std::string> value = lookup(name)) out += *value;
    else if (colon != std::string_view::npos) out += inside.substr(colon + 1);
    else {
      fail(fmt::format("environment variable {} is not set (write {{${}:default}} to give a default, "
                       "{{${}:}} for an empty one)", name, name, name));
      return;
    }
    pos = close + 1;
  }
  out.append(token.text, pos);
  token.text = std::move(out);
}

void expand_all(std::vector<Directive>& directives, std::string_view file, const EnvironmentLookup& lookup,
                std::vector<Diagnostic>& errors) {
  for (Directive& d : directives) {
    if (d.is_comment) continue;
    expand_token(d.name, file, lookup, errors);
    for (Token& arg : d.args) expand_token(arg, file, lookup, errors);
    expand_all(d.block, file, lookup, errors);
  }
}

}  // namespace

void expand_environment(Tree& tree, std::string_view file, const EnvironmentLookup& lookup,
                        std::vector<Diagnostic>& errors) {
  expand_all(tree.top, file, lookup, errors);
}

std::string format(const Tree& tree) {
  std::string out;
  print(tree.top, 0, out);
  return out;
}

}  // namespace heft::config::syntax
