// tree-sitter cannot see through these macros: an ERROR region.
#define BEGIN_NS(name) namespace name {
#define END_NS }
#define DECLARE_HANDLER(name) void name##_handler(int code)

BEGIN_NS(handlers)

DECLARE_HANDLER(open) {
  if (code > 0) {
    log_open(code);
  }
}

DECLARE_HANDLER(close) {
  switch (code) {
    case 0: reset(); break;
    default: log_close(code);
  }
}

END_NS

int after_the_macros(int x) {
  return x + 1;
}
