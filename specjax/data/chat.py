"""Chat templates: a model's jinja2 template rendered the way Hugging Face transformers does.

    text = render_chat(template, [{"role": "user", "content": "Hi"}], add_generation_prompt=True)

A chat template is a jinja2 program shipped with the model (`tokenizer.chat_template` in a GGUF
file or a `tokenizer_config.json`). It is untrusted code, so it runs in jinja2's
`ImmutableSandboxedEnvironment`, configured as transformers configures it: `trim_blocks` and
`lstrip_blocks`, the `loopcontrols` extension, `raise_exception(message)` and a `tojson` filter
that does not escape HTML. The sandbox refuses Python internals (`''.__class__.__mro__`) and
mutation of the arguments (`messages.append(...)`). Every failure is one `ValueError` line that
names the argument or the template.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping

import jinja2
import jinja2.ext
from jinja2.exceptions import SecurityError, TemplateError, TemplateSyntaxError
from jinja2.sandbox import ImmutableSandboxedEnvironment


class ChatTemplateError(ValueError):
    """The template itself failed: it raised, or the sandbox refused what it did."""


def _raise_exception(message):
    raise TemplateError(message)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # jinja2's own tojson escapes <, >, & and ' for HTML; templates expect plain JSON.
    return json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


@functools.lru_cache(maxsize=16)
def _compile(template: str) -> jinja2.Template:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    return env.from_string(template)


def check_messages(messages, name: str = "messages") -> list[dict]:
    """The conversation as a list of plain dicts, after checking its shape.

    Args:
      messages: a non-empty list of mappings, each with a str "role" and a str "content".
      name: the argument's name, for error messages.

    Returns:
      A list of dicts (copies: the template cannot change the caller's objects).
    """
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, (list, tuple)):
        raise TypeError(
            f"{name} must be a list of {{'role': ..., 'content': ...}} dicts, "
            f"got {type(messages).__name__}"
        )
    if not messages:
        raise ValueError(f"{name} is empty: a conversation needs at least one message")
    out = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise TypeError(
                f"{name}[{i}] must be a dict with 'role' and 'content', "
                f"got {type(message).__name__}"
            )
        for key in ("role", "content"):
            if key not in message:
                raise ValueError(
                    f"{name}[{i}] has no {key!r}: every message needs a 'role' and a 'content'"
                )
            if not isinstance(message[key], str):
                raise TypeError(
                    f"{name}[{i}][{key!r}] must be a str, got {type(message[key]).__name__}"
                )
        out.append(dict(message))
    return out


def render_chat(template: str, messages, *, add_generation_prompt: bool = True, **variables) -> str:
    """Renders a chat template for one conversation.

    Args:
      template: the jinja2 source (e.g. a GGUF's `tokenizer.chat_template`).
      messages: the conversation (see `check_messages`).
      add_generation_prompt: end with the header of the assistant's turn, so that the model
        writes the reply next.
      **variables: further template variables (`bos_token`, `eos_token`, ...).

    Returns:
      The rendered text (special tokens spelled out, e.g. "<|im_start|>").

    Raises:
      ChatTemplateError: the template does not parse, raises, or the sandbox refused it.
    """
    messages = check_messages(messages)
    try:
        compiled = _compile(template)
    except TemplateSyntaxError as e:
        raise ChatTemplateError(
            f"chat_template does not parse (line {e.lineno}): {e.message}"
        ) from e
    try:
        return compiled.render(
            messages=messages, add_generation_prompt=add_generation_prompt, **variables
        )
    except SecurityError as e:
        raise ChatTemplateError(
            f"chat_template was refused by the jinja2 sandbox (it reached for Python "
            f"internals or tried to modify its arguments): {e}"
        ) from e
    except TemplateError as e:
        raise ChatTemplateError(f"chat_template raised an error for these messages: {e}") from e
    except Exception as e:  # a template bug (e.g. str + None): still one line, naming it
        raise ChatTemplateError(
            f"chat_template failed for these messages: {type(e).__name__}: {e}"
        ) from e
