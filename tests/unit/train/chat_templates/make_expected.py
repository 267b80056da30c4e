#!/usr/bin/env python3
"""Writes NAME.CONVERSATION.txt: each case of cases.json rendered by Jinja2
itself, configured as transformers' apply_chat_template configures it
(trim_blocks, lstrip_blocks, loop controls, its own tojson and
raise_exception). A render the template refuses is written as
"ERROR: <message>". test_chat_template.c compares alallo's renders with
these files. Run it again only when a case changes (python3-jinja2)."""
import json, os, sys
import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

here = os.path.dirname(os.path.abspath(__file__))

def raise_exception(msg):
    raise jinja2.exceptions.TemplateError(msg)

def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)

env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                    extensions=["jinja2.ext.loopcontrols"])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
spec = json.load(open(os.path.join(here, "cases.json")))
for name, conv in spec["cases"]:
    src = open(os.path.join(here, name + ".jinja")).read()
    ctx = dict(spec["tokens"])
    ctx["add_generation_prompt"] = False
    ctx.update(spec["conversations"][conv])
    try:
        out = env.from_string(src).render(**ctx)
    except jinja2.exceptions.TemplateError as e:
        out = "ERROR: " + str(e)
    with open(os.path.join(here, "%s.%s.txt" % (name, conv)), "w") as f:
        f.write(out)
