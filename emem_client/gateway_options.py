"""Which embedding gateway the options or the environment name: the one place the command line, the
HTTP service's app factory and the MCP server choose it (the embedded model loads only when used)."""

from collections.abc import Mapping

from emem_client.gateways import EmbeddedGateway, Gateway, OpenAIGateway

OPENAI_DEFAULT_URL = "https://api.openai.com/v1"
OPENAI_DEFAULT_MODEL = "text-embedding-3-small"
OPENAI_DEFAULT_KEY_ENV = "OPENAI_API_KEY"
OPENAI_DEFAULT_TIMEOUT = 30.0  # seconds per request to the embeddings service
GATEWAYS = ("embedded", "openai")


def make_gateway(
    kind: str,
    base_url: str = OPENAI_DEFAULT_URL,
    model: str = OPENAI_DEFAULT_MODEL,
    api_key_env: str = OPENAI_DEFAULT_KEY_ENV,
    timeout: float = OPENAI_DEFAULT_TIMEOUT,
) -> Gateway:
    if kind == "embedded":
        return EmbeddedGateway()
    if kind == "openai":
        return OpenAIGateway(base_url, model, api_key_env=api_key_env, timeout=timeout)
    raise ValueError(f"{kind!r} is not a gateway; accepted: {', '.join(GATEWAYS)}")


def gateway_from_environment(environ: Mapping[str, str]) -> Gateway:
    """EMEM_GATEWAY (`embedded`, the default, or `openai`), OPENAI_BASE_URL, EMEM_OPENAI_MODEL,
    EMEM_OPENAI_API_KEY_ENV and EMEM_OPENAI_TIMEOUT (seconds)."""
    try:
        timeout = float(environ.get("EMEM_OPENAI_TIMEOUT", OPENAI_DEFAULT_TIMEOUT))
    except ValueError:
        raise ValueError(f"EMEM_OPENAI_TIMEOUT={environ['EMEM_OPENAI_TIMEOUT']!r} is not a number of seconds") from None
    try:
        return make_gateway(
            environ.get("EMEM_GATEWAY", "embedded"),
            environ.get("OPENAI_BASE_URL", OPENAI_DEFAULT_URL),
            environ.get("EMEM_OPENAI_MODEL", OPENAI_DEFAULT_MODEL),
            environ.get("EMEM_OPENAI_API_KEY_ENV", OPENAI_DEFAULT_KEY_ENV),
            timeout,
        )
    except ValueError as error:
        raise ValueError(f"EMEM_GATEWAY: {error}") from None
