/* modelfile.h - an Ollama Modelfile for a GGUF export: `FROM ./FILE.gguf`,
 * the model's chat layout as an Ollama (Go text/template) TEMPLATE, and a
 * stop PARAMETER for each of its end-of-turn texts.
 *
 * The TEMPLATE is read off the model's own chat template, not guessed from
 * its family: the template renders probe conversations whose contents are
 * unique markers, and the text around the markers becomes the text around
 * {{ .Content }} per role (system, user, assistant) plus the generation
 * prompt. A model without a chat template gets alallo's plain layout
 * (docs/data.md): "System:\n", "User:\n", "Assistant:\n" headers, a blank
 * line between messages, EOS after each assistant turn.
 *
 * Ownership: modelfile_text returns malloc'd text the caller frees.
 */
#ifndef ALALLO_TRAIN_MODELFILE_H
#define ALALLO_TRAIN_MODELFILE_H

#include <stddef.h>

/* The Modelfile text for the model in model_dir whose GGUF is called
 * gguf_name (a file name, written after "FROM ./"). NULL with a reason. */
char *modelfile_text(const char *model_dir, const char *gguf_name, char *err, size_t errcap);

/* Writes modelfile_text atomically to out_path (which must not exist).
 * 0, or -1 with a reason. */
int modelfile_write(const char *model_dir, const char *gguf_name, const char *out_path, char *err,
                    size_t errcap);

#endif
