/* chat_template.h - a Jinja subset, enough to render the chat templates
 * that Hugging Face models carry in tokenizer_config.json ("chat_template").
 *
 * The template is rendered the way transformers' apply_chat_template does:
 * trim_blocks and lstrip_blocks on, `tojson` as Python's json.dumps with
 * ensure_ascii off and keys in their order, and a `raise_exception(msg)`
 * function that stops the render with msg.
 *
 * Supported (docs/data.md lists it for users):
 *   statements  for (one name or a pair; `if` filter; else; loop.index,
 *               index0, revindex, revindex0, first, last, length, previtem,
 *               nextitem), if/elif/else, set (a name, `ns.attr`), macro
 *               (with defaults), break, continue, generation (passed through),
 *               comments, whitespace control ({%- -%} {{- -}})
 *   expressions literals (strings, numbers, true/false/none, lists, dicts),
 *               . [] [a:b:c] calls, not and or, == != < > <= >= in, not in,
 *               is / is not tests, + - * / // % ~, `a if c else b`
 *   filters     trim length count upper lower title capitalize string int
 *               float first last join default d list items tojson replace
 *               selectattr rejectattr select reject map abs unique reverse
 *               safe indent
 *   tests       defined undefined none string number integer float mapping
 *               iterable sequence boolean true false even odd equalto eq ne
 *               in divisibleby
 *   methods     str: strip lstrip rstrip split startswith endswith upper lower
 *               title capitalize replace; dict: items keys values get
 *   globals     range, namespace, raise_exception
 * Anything else fails at parse or render time with a message that names the
 * construct ("unsupported statement \"include\" at line 3").
 *
 * Values are jansson values (an undefined value is NULL). Ownership: the
 * parsed template is the caller's (chat_template_free); the context is
 * only read; the rendered text is malloc'd and the caller's.
 */
#ifndef ALALLO_TRAIN_CHAT_TEMPLATE_H
#define ALALLO_TRAIN_CHAT_TEMPLATE_H

#include <jansson.h>
#include <stddef.h>

#define CHAT_TEMPLATE_MAX_SOURCE (1 << 20) /* bytes of template text */
#define CHAT_TEMPLATE_MAX_OUTPUT (64 << 20) /* bytes one render may write */

struct chat_template;

/* Parses `len` bytes of template text. NULL with a one-line reason in err
 * (e.g. "chat template line 4: unsupported statement \"include\""). */
struct chat_template *chat_template_parse(const char *src, size_t len, char *err, size_t errcap);
void chat_template_free(struct chat_template *t); /* NULL is fine */

/* Renders t with the variables of `vars` (a JSON object). 0 and *out
 * (malloc'd, NUL-terminated, *out_len bytes); or -1 with a reason in err:
 * the template's own raise_exception text ("the chat template refused:
 * ..."), or what went wrong and where. */
int chat_template_render(const struct chat_template *t, const json_t *vars, char **out /* OUT */,
                         size_t *out_len /* OUT */, char *err, size_t errcap);

#endif
