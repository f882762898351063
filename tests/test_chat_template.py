"""`specjax.data.chat.render_chat`: jinja2 chat templates rendered as transformers renders them.

Exact rendered strings for the features templates rely on (trim_blocks / lstrip_blocks,
`raise_exception`, `tojson`, loop controls), and one-line refusals: malformed messages, a
template that raises, one that does not parse, and the sandbox refusing Python internals and
mutation. `tests/test_real_model_hf.py` compares with transformers' own rendering.
"""

import pytest

from specjax.data.chat import ChatTemplateError, check_messages, render_chat

USER = [{"role": "user", "content": "Hi <b>&</b>"}]


def test_trim_and_lstrip_blocks_as_transformers_configures_them():
    template = (
        "{% for m in messages %}\n"
        "    {% if m['role'] == 'user' %}\n"
        "U: {{ m['content'] }}\n"
        "    {% endif %}\n"
        "{% endfor %}\n"
        "{% if add_generation_prompt %}A:{% endif %}"
    )
    # The block tags' own lines vanish (lstrip_blocks eats the indent, trim_blocks the newline).
    assert render_chat(template, USER) == "U: Hi <b>&</b>\nA:"
    assert render_chat(template, USER, add_generation_prompt=False) == "U: Hi <b>&</b>\n"


def test_tojson_does_not_escape_html_and_takes_options():
    assert render_chat("{{ messages | tojson }}", USER) == (
        '[{"role": "user", "content": "Hi <b>&</b>"}]'
    )
    assert render_chat("{{ messages[0] | tojson(indent=1) }}", USER) == (
        '{\n "role": "user",\n "content": "Hi <b>&</b>"\n}'
    )


def test_variables_and_loop_controls():
    template = "{{ bos_token }}{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}{{ m['content'] }}{% endfor %}"  # noqa: E501
    two = USER + [{"role": "assistant", "content": "no"}]
    assert render_chat(template, two, bos_token="<s>") == "<s>Hi <b>&</b>"


def test_raise_exception_becomes_one_line_naming_the_template():
    template = "{% if messages[0]['role'] != 'system' %}{{ raise_exception('need a system turn') }}{% endif %}"  # noqa: E501
    with pytest.raises(
        ChatTemplateError,
        match="^chat_template raised an error for these messages: need a system turn$",
    ):  # noqa: E501
        render_chat(template, USER)


@pytest.mark.parametrize(
    "template",
    [
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ messages.__class__.__base__ }}{{ cycler.__init__.__globals__.os }}",
        "{{ messages.append({'role': 'x', 'content': 'y'}) }}",
        "{{ messages[0].update({'content': 'changed'}) }}",
    ],
)
def test_the_sandbox_refuses_python_internals_and_mutation(template):
    messages = [dict(USER[0])]
    with pytest.raises(ChatTemplateError, match="refused by the jinja2 sandbox") as info:
        render_chat(template, messages)
    assert "\n" not in str(info.value)
    assert messages == USER  # nothing changed


def test_a_template_that_does_not_parse_or_fails_is_one_line():
    with pytest.raises(ChatTemplateError, match=r"^chat_template does not parse \(line 1\)"):
        render_chat("{% for m in messages %}", USER)
    with pytest.raises(ChatTemplateError, match="TypeError: can only concatenate str"):
        render_chat("{{ messages[0]['content'] + 3 }}", USER)


@pytest.mark.parametrize(
    "messages, error, match",
    [
        ([{"role": "user"}], ValueError, r"^messages\[0\] has no 'content'"),
        ([{"content": "x"}], ValueError, r"^messages\[0\] has no 'role'"),
        (
            [{"role": "user", "content": None}],
            TypeError,
            r"messages\[0\]\['content'\] must be a str",
        ),  # noqa: E501
        (["hi"], TypeError, r"messages\[0\] must be a dict"),
        ([], ValueError, "messages is empty"),
        ({"role": "user", "content": "x"}, TypeError, "messages must be a list"),
        ("hi", TypeError, "messages must be a list"),
    ],
)
def test_malformed_messages_name_the_argument(messages, error, match):
    with pytest.raises(error, match=match):
        render_chat("{{ messages }}", messages)
    with pytest.raises(error, match=match.replace("messages", "conversation")):
        check_messages(messages, "conversation")


def _word_level_dir(path, config: dict | None):
    """A checkpoint directory with a word-level tokenizer.json (and a tokenizer_config.json)."""
    import json

    tokenizers = pytest.importorskip("tokenizers")
    words = ["<s>", "</s>", "<unk>", "user", "hi", ":"]
    tok = tokenizers.Tokenizer(
        tokenizers.models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>")
    )
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens(["<s>", "</s>"])
    path.mkdir()
    tok.save(str(path / "tokenizer.json"))
    if config is not None:
        (path / "tokenizer_config.json").write_text(json.dumps(config))
    return path


TEMPLATE = "{{ bos_token }}{% for m in messages %} {{ m['role'] }} : {{ m['content'] }}{% endfor %}"


@pytest.mark.parametrize("backend", ["tokenizers", "transformers"])
def test_hf_directory_tokenizers_render_their_template(tmp_path, monkeypatch, backend):
    """A checkpoint directory's template (tokenizer_config.json) renders through specjax with
    either backend; a directory without one says so."""
    from specjax.convert import tokenizer as tokenizer_module

    if backend == "tokenizers":  # hide transformers: the tokenizer.json-only path
        import builtins

        real_import = builtins.__import__

        def no_transformers(name, *args, **kwargs):
            if name == "transformers":
                raise ImportError(name)
            return real_import(name, *args, **kwargs)

        monkeypatch.setattr(builtins, "__import__", no_transformers)
    else:
        pytest.importorskip("transformers")
    config = {"chat_template": TEMPLATE, "bos_token": "<s>", "eos_token": "</s>"}
    path = _word_level_dir(tmp_path / "with", config)
    tok = tokenizer_module.load_hf_tokenizer(path, {"bos_token_id": 0, "eos_token_id": 1})
    assert tok._is_transformers == (backend == "transformers")
    messages = [{"role": "user", "content": "hi"}]
    assert tok.apply_chat_template(messages, tokenize=False) == "<s> user : hi"
    assert tok.apply_chat_template(messages).tolist() == [0, 3, 5, 4]
    bare = tokenizer_module.load_hf_tokenizer(_word_level_dir(tmp_path / "without", None))
    with pytest.raises(ValueError, match="this tokenizer has no chat template"):
        bare.apply_chat_template(messages)
