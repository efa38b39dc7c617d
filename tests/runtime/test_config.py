import pytest

from agentweb.runtime.anthropic import AnthropicModel
from agentweb.runtime.gateway import ConfigError
from agentweb.runtime.models import model_from_config
from agentweb.runtime.openai import OpenAIChatModel


def test_it_builds_an_openai_compatible_model_from_env():
    m = model_from_config("openai:qwen2.5", {"OPENAI_BASE_URL": "http://127.0.0.1:11434/v1/"})
    assert isinstance(m, OpenAIChatModel)
    assert m.url == "http://127.0.0.1:11434/v1/chat/completions"
    assert m.name == "openai:qwen2.5" and m.scripted is False
    assert m.provider.api_key is None  # a local server needs no key


def test_it_builds_an_anthropic_model_from_env():
    m = model_from_config(
        "anthropic:claude-x", {"ANTHROPIC_BASE_URL": "http://127.0.0.1:9", "ANTHROPIC_API_KEY": "k"}
    )
    assert isinstance(m, AnthropicModel)
    assert m.url == "http://127.0.0.1:9/v1/messages"
    assert m.provider.api_key == "k"


@pytest.mark.parametrize(
    ("spec", "env", "variable"),
    [
        ("gpt-4", {}, "AGENTWEB_MODEL"),
        ("openai:", {}, "AGENTWEB_MODEL"),
        ("mistral:large", {}, "AGENTWEB_MODEL"),
        ("openai:gpt-4o", {}, "OPENAI_API_KEY"),
        ("anthropic:claude", {}, "ANTHROPIC_API_KEY"),
        ("openai:gpt-4o", {"OPENAI_BASE_URL": "localhost:8000"}, "OPENAI_BASE_URL"),
        (
            "anthropic:c",
            {"ANTHROPIC_BASE_URL": "ftp://x", "ANTHROPIC_API_KEY": "k"},
            "ANTHROPIC_BASE_URL",
        ),
    ],
)
def test_bad_configuration_names_the_variable(spec, env, variable):
    with pytest.raises(ConfigError, match=variable):
        model_from_config(spec, env)


def test_demo_is_the_scripted_model_the_application_hands_in():
    class Scripted:
        name = "demo"
        scripted = True

    assert isinstance(model_from_config("demo", {}, demo=Scripted), Scripted)


def test_demo_without_a_scripted_model_names_the_variable():
    with pytest.raises(ConfigError, match="AGENTWEB_MODEL.*demo_model"):
        model_from_config("demo", {})


def test_an_unusable_url_is_a_model_error_not_a_crash():
    from agentweb.runtime.gateway import ModelError
    from agentweb.runtime.messages import UserMessage
    from agentweb.runtime.providers import Provider

    model = OpenAIChatModel("m", Provider(name="openai", base_url="http://127.0.0.1:1/v1\x00x"))
    with pytest.raises(ModelError, match="openai"):
        model.complete([UserMessage(content="x")], [])
