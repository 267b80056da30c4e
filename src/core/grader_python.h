/* grader_python.h - python graders (docs/rft.md): a user's `source`,
 * which defines grade(sample, item) -> float, run in the sandbox
 * (sandbox.h) once per answer. alallo's runner program reads
 * {"mode", "source", "sample", "item"} as JSON on stdin, runs the source
 * as a module, calls grade and writes the score as one JSON number on
 * stdout; the source's own prints go to stderr. `sample` is
 * {"output_text": the answer, "output_json": the answer parsed when it is
 * a JSON object or array, else null, "output_tools": []}; `item` is the
 * data line. Anything but a finite number (an exception, a time or memory
 * limit met, another type) is an error with a sentence.
 */
#ifndef ALALLO_CORE_GRADER_PYTHON_H
#define ALALLO_CORE_GRADER_PYTHON_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "core/sandbox.h"

/* Scores answer `sample` for data line `item` with `source` under lim.
 * false with a sentence in err. */
bool grader_python_run(const char *source, const char *sample, const json_t *item,
                       const struct sandbox_limits *lim, double *score /* OUT */, char *err,
                       size_t errcap);

/* Whether source compiles and defines a function grade, run as a module
 * in the sandbox (its top level runs, under the limits). false with a
 * sentence in err. */
bool grader_python_compiles(const char *source, const struct sandbox_limits *lim, char *err,
                            size_t errcap);

/* Whether every python grader in g (itself, or a multi's) can run here:
 * the sandbox works on this machine and its source compiles. g must have
 * passed grader_check; `at` is where it sits in the request. false with
 * the field at fault in param (at, or at + ".source") and a sentence in
 * msg. true at once when g holds no python grader. */
/* How many python graders g holds (g itself, or a multi's); each runs
 * once per answer graded. g must have passed grader_check. */
int grader_python_count(const json_t *g);

bool grader_python_ready(const json_t *g, const char *at, char *param, size_t paramcap,
                         char *msg, size_t msgcap);

#endif
