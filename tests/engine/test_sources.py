"""Model sources: every seed form parses, round-trips through its canonical URI, and bad ones name the problem."""

from __future__ import annotations

import pytest

from engine.caches.source_fields import from_kthena_uri, from_lora_url, from_openmodel_source
from engine.caches.sources import ModelSource, SourceError, parse_source

# ------------------------------------------------------------------------------------------ every form parses


def test_aim_hf_source_defaults_to_main_and_is_downloadable() -> None:
    source = parse_source("hf://amd/Llama-3.1-8B-Instruct-FP8-KV")
    assert source.scheme == "hf"
    assert source.repo == "amd/Llama-3.1-8B-Instruct-FP8-KV"
    assert source.revision == "main"
    assert source.downloadable and not source.mounted
    assert source.uri == "hf://amd/Llama-3.1-8B-Instruct-FP8-KV"


@pytest.mark.parametrize("text", ["hf://org/name@v1.0", "hf://org/name:v1.0"])
def test_hf_revision_with_at_or_kserve_colon(text: str) -> None:
    source = parse_source(text)
    assert (source.repo, source.revision) == ("org/name", "v1.0")
    assert source.uri == "hf://org/name@v1.0"


def test_hf_single_name_repo_and_pr_revision() -> None:
    assert parse_source("hf://gpt2").repo == "gpt2"
    source = parse_source("hf://org/name@refs/pr/1")
    assert source.revision == "refs/pr/1"
    assert parse_source(source.uri) == source


def test_hf_patterns_and_filename_as_query() -> None:
    source = parse_source("hf://org/name@abc123?allow=*.safetensors&allow=*.json&ignore=original/*")
    assert source.allow_patterns == ("*.json", "*.safetensors")
    assert source.ignore_patterns == ("original/*",)
    assert source.uri == "hf://org/name@abc123?allow=*.json&allow=*.safetensors&ignore=original/*"
    single = parse_source("hf://org/name?filename=model-q4_k_m.gguf")
    assert single.filename == "model-q4_k_m.gguf"
    assert single.uri == "hf://org/name?filename=model-q4_k_m.gguf"


def test_https_huggingface_urls_normalise_to_hf() -> None:
    assert parse_source("https://huggingface.co/org/name").uri == "hf://org/name"
    assert parse_source("https://huggingface.co/org/name/").uri == "hf://org/name"
    assert parse_source("https://huggingface.co/org/name/tree/v2").uri == "hf://org/name@v2"
    resolved = parse_source("https://huggingface.co/org/name/resolve/main/sub/model.gguf")
    assert (resolved.repo, resolved.revision, resolved.filename) == ("org/name", "main", "sub/model.gguf")


def test_s3_bucket_prefix_and_endpoint() -> None:
    source = parse_source("s3://models/llama/8b/")
    assert (source.bucket, source.prefix, source.endpoint) == ("models", "llama/8b", None)
    assert source.uri == "s3://models/llama/8b"
    assert source.downloadable
    whole = parse_source("s3://models")
    assert whole.prefix == "" and whole.uri == "s3://models"
    custom = parse_source("s3://models/x?endpoint=http://127.0.0.1:9000")
    assert custom.endpoint == "http://127.0.0.1:9000"
    assert parse_source(custom.uri) == custom


@pytest.mark.parametrize("bucket", ["aios_models", "Legacy_Bucket", "a.b-c_d", "x" * 255])
def test_bucket_names_s3_compatible_stores_accept(bucket: str) -> None:
    """S3's legacy (us-east-1) naming rule, which Kthena's examples rely on (``s3://aios_models``)."""
    source = parse_source(f"s3://{bucket}/m")
    assert source.bucket == bucket and parse_source(source.uri) == source
    assert from_kthena_uri(f"s3://{bucket}/m", "spec.backends[0].modelURI").bucket == bucket


def test_kthena_pvc_and_hostpath() -> None:
    pvc = parse_source("pvc://weights/models/llama")
    assert (pvc.claim, pvc.path) == ("weights", "models/llama")
    assert pvc.mounted and not pvc.downloadable
    assert parse_source("pvc://weights").path is None
    host = parse_source("hostpath://data/models")
    assert host.path == "/data/models"
    assert host.uri == "hostpath:///data/models"
    assert parse_source(host.uri) == host


def test_llmaz_uris() -> None:
    oss = parse_source("oss://bucket.oss-cn-hangzhou.aliyuncs.com/models/llama")
    assert (oss.bucket, oss.endpoint, oss.prefix) == ("bucket", "oss-cn-hangzhou.aliyuncs.com", "models/llama")
    assert oss.uri == "oss://bucket.oss-cn-hangzhou.aliyuncs.com/models/llama"
    assert parse_source("gcs://bucket/path").scheme == "gcs"
    assert parse_source("host:///mnt/models").path == "/mnt/models"
    ollama = parse_source("ollama://llama3.3")
    assert ollama.name == "llama3.3" and not ollama.downloadable
    assert parse_source("ollama://llama3.2:1b").name == "llama3.2:1b"


ROUND_TRIP = [
    "hf://org/name",
    "hf://org/name@0123456789abcdef0123456789abcdef01234567",
    "hf://org/name@main?allow=*.json&allow=tokenizer*",
    "hf://org/name?ignore=*.bin&ignore=*.pt",
    "hf://org/name?filename=sub/dir/model.gguf",
    "hf://org/name?allow=a%26b%3Dc%23d%3Fe%25",
    "modelscope://qwen/Qwen2-0.5B@v1",
    "s3://bucket/prefix/with/parts",
    "s3://bucket/space%20name",
    "s3://bucket?endpoint=https://minio.local:9000",
    "gcs://bucket/p",
    "oss://bucket.endpoint.example.com/models/m",
    "pvc://claim",
    "pvc://claim/sub/path",
    "hostpath:///var/cache",
    "host:///models",
    "ollama://llama3.3",
]


@pytest.mark.parametrize("text", ROUND_TRIP)
def test_canonical_uri_round_trips(text: str) -> None:
    source = parse_source(text)
    assert parse_source(source.uri) == source
    assert parse_source(source.uri).uri == source.uri


def test_special_characters_in_patterns_survive_the_query() -> None:
    source = ModelSource(scheme="hf", repo="org/name", allow_patterns=("a&b=c#d?e%", "*.json"))
    again = parse_source(source.uri)
    assert again.allow_patterns == ("*.json", "a&b=c#d?e%")


def test_equal_sources_in_different_spellings_are_equal() -> None:
    assert parse_source("hf://org/name@main") == parse_source("hf://org/name")
    assert parse_source("HF://org/name") == parse_source("hf://org/name")
    assert parse_source("hf://org/name?allow=b&allow=a&allow=a") == parse_source("hf://org/name?allow=a&allow=b")
    assert parse_source("s3://b1x/p/") == parse_source("s3://b1x/p")


# ---------------------------------------------------------------------------------------- rejections name it


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("org/name", "scheme://"),
        ("ftp://x/y", "unknown scheme 'ftp'"),
        ("hf://", "repository id"),
        ("hf://a/b/c", "more than one '/'"),
        ("hf://org/na--me", "not valid"),
        ("hf://org/name@", "empty revision"),
        ("hf://org/name?filename=x.gguf&allow=*.json", "filename and allow/ignore patterns"),
        ("hf://org/name?filename=../x", "relative path"),
        ("hf://org/name?bogus=1", "unknown query key 'bogus'"),
        ("hf://org/name?allow", "no '='"),
        ("hf://org/name?allow=%zz", "percent-escape"),
        ("hf://org/name#frag", "fragment"),
        ("hf://org/my name", "whitespace"),
        ("modelscope://org/name?filename=x", "unknown query key 'filename'"),
        ("s3://", "needs a bucket"),
        ("s3://_models/x", "bucket name '_models'"),
        ("s3://models-/x", "bucket name 'models-'"),
        ("s3://10.0.0.1/x", "bucket name '10.0.0.1'"),
        ("s3://my$bucket/x", "bucket name 'my$bucket'"),
        ("s3://ab/x", "bucket name 'ab'"),
        ("s3://bucket/../x", "'..'"),
        ("s3://bucket/x?endpoint=not a url", "whitespace"),
        ("oss://bucket/path", "bucket and an endpoint"),
        ("oss://.endpoint/path", "bucket and an endpoint"),
        ("oss://bucket.endpoint", "model path"),
        ("pvc://", "claim name"),
        ("pvc://Bad_Claim/x", "claim name 'Bad_Claim'"),
        ("pvc://claim/../etc", "'..'"),
        ("hostpath://", "needs a path"),
        ("host:///a/../b", "'..'"),
        ("ollama://", "ollama model name"),
    ],
)
def test_rejections_name_the_problem(text: str, needle: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_source(text)
    assert needle in str(info.value)


def test_not_a_string() -> None:
    with pytest.raises(ValueError, match="must be a string"):
        parse_source(None)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------- llmaz OpenModel source


def test_openmodel_hub_defaults_to_huggingface_main() -> None:
    source = from_openmodel_source({"modelHub": {"modelID": "Qwen/Qwen2-0.5B-Instruct"}})
    assert source.uri == "hf://Qwen/Qwen2-0.5B-Instruct"
    assert source.revision == "main"


def test_openmodel_hub_with_everything() -> None:
    source = from_openmodel_source(
        {
            "modelHub": {
                "name": "Huggingface",
                "modelID": "org/name",
                "revision": "v2",
                "allowPatterns": ["*.json", "*.safetensors"],
                "ignorePatterns": ["original/*"],
            }
        }
    )
    assert source.uri == "hf://org/name@v2?allow=*.json&allow=*.safetensors&ignore=original/*"
    gguf = from_openmodel_source({"modelHub": {"modelID": "org/name-GGUF", "filename": "q4.gguf"}})
    assert gguf.filename == "q4.gguf"
    scope = from_openmodel_source({"modelHub": {"name": "ModelScope", "modelID": "qwen/Qwen2"}})
    assert scope.scheme == "modelscope" and not scope.downloadable


def test_openmodel_uris() -> None:
    assert from_openmodel_source({"uri": "oss://bkt.ep.example.com/m"}).scheme == "oss"
    assert from_openmodel_source({"uri": "s3://bucket/m"}).scheme == "s3"
    assert from_openmodel_source({"uri": "host:///models/m"}).path == "/models/m"
    assert from_openmodel_source({"uri": "ollama://llama3.3"}).name == "llama3.3"


@pytest.mark.parametrize(
    ("spec_source", "field", "needle"),
    [
        ({}, "spec.source", "can't be all null"),
        (None, "spec.source", "can't be all null"),
        ({"uri": "ftp://x/y"}, "spec.source.uri", "unknown schema"),
        ({"uri": "pvc://claim/x"}, "spec.source.uri", "unknown schema"),
        ({"uri": "no-scheme"}, "spec.source.uri", "wrong address"),
        ({"uri": "oss://bucket/path"}, "spec.source.uri", "bucket and an endpoint"),
        ({"uri": "oss://.ep/path"}, "spec.source.uri", "bucket and an endpoint"),
        ({"modelHub": {"name": "Civitai", "modelID": "a/b"}}, "spec.source.modelHub.name", "unknown model hub"),
        ({"modelHub": {"modelID": ""}}, "spec.source.modelHub.modelID", "required"),
        ({"modelHub": {"modelID": "a/b/c"}}, "spec.source.modelHub.modelID", "repository id"),
        (
            {"modelHub": {"modelID": "a/b", "filename": "x.gguf", "allowPatterns": ["*"]}},
            "spec.source.modelHub.allowPatterns",
            "filename and allowPatterns",
        ),
        (
            {"modelHub": {"modelID": "a/b", "filename": "x.gguf", "ignorePatterns": ["*"]}},
            "spec.source.modelHub.ignorePatterns",
            "filename and ignorePatterns",
        ),
        (
            {"modelHub": {"name": "ModelScope", "modelID": "a/b", "filename": "x.gguf"}},
            "spec.source.modelHub.filename",
            "only be set when the model hub is Huggingface",
        ),
    ],
)
def test_openmodel_webhook_rejections_carry_the_field_path(spec_source: dict | None, field: str, needle: str) -> None:
    with pytest.raises(SourceError) as info:
        from_openmodel_source(spec_source)
    assert info.value.field == field
    assert str(info.value).startswith(f"{field}: ")
    assert needle in str(info.value)


# ------------------------------------------------------------------------------------------------ Kthena URIs


def test_kthena_model_cache_and_lora_uris() -> None:
    assert from_kthena_uri("hf://org/name").scheme == "hf"
    assert from_kthena_uri("s3://bucket/m").scheme == "s3"
    assert from_kthena_uri("pvc://claim/m").claim == "claim"
    assert from_kthena_uri("hostpath://data", field="spec.backends[0].cacheURI").path == "/data"
    assert from_kthena_uri("pvc://cache", field="cacheURI").claim == "cache"
    assert from_lora_url("hf://org/lora").repo == "org/lora"


@pytest.mark.parametrize(
    ("uri", "field", "needle"),
    [
        ("hostpath://data", "spec.backends[0].modelURI", "does not match ^(hf://|pvc://|s3://).+"),
        ("s3://bucket/x", "spec.backends[0].cacheURI", "does not match ^(hostpath://|pvc://).+"),
        ("", "spec.backends[0].modelURI", "must not be empty"),
        ("hf://a/b/c", "spec.backends[1].modelURI", "more than one '/'"),
        ("oss://bkt.e/p", "spec.backends[0].loraAdapters[0].artifactURL", "does not match"),
    ],
)
def test_kthena_rejections_carry_the_field_path(uri: str, field: str, needle: str) -> None:
    with pytest.raises(SourceError) as info:
        from_kthena_uri(uri, field=field)
    assert info.value.field == field
    assert needle in str(info.value)


# ------------------------------------------------------------------------------- credentials pasted into a URI


@pytest.mark.parametrize(
    ("uri", "secret", "kept"),
    [
        ("s3://AKIAKEY:supersecret@minio.local/bucket/model", "supersecret", "***@minio.local"),
        ("s3://models/llama?endpoint=https://AKIAKEY:hunter2@minio.local:9000", "hunter2", "https://***@minio.local"),
        ("s3://models/llama?X-Amz-Signature=0a1b2c3d&X-Amz-Credential=AKIA/2026", "0a1b2c3d", "X-Amz-Signature=***"),
        ("s3://models/llama?X-Amz-Security-Token=FwoGZXIvYXdzE", "FwoGZXIvYXdzE", "X-Amz-Security-Token=***"),
        ("oss://user:pa55word@bkt.endpoint/path?sig=abc123", "pa55word", "***@bkt.endpoint"),
        ("hf://org/name@main?token=hf_abcdef", "hf_abcdef", "token=***"),
    ],
)
def test_a_rejected_source_never_quotes_the_credentials_pasted_into_it(uri: str, secret: str, kept: str) -> None:
    """A pasted URI's ``user:password@`` and credential-named query values are masked in the rejection, which
    reaches status conditions, Events and logs; the rest of the URI stays, so the reader sees which one it was."""
    with pytest.raises(SourceError) as info:
        from_kthena_uri(uri, field="spec.backends[0].modelURI") if not uri.startswith("oss") else parse_source(uri)
    assert secret not in str(info.value) and secret not in info.value.reason
    assert kept in str(info.value)


@pytest.mark.parametrize("uri", ["hf://gpt2@main", "hf://org/name@v1.0", "hf://org/name:v1.0"])
def test_a_revision_after_at_is_not_taken_for_a_user(uri: str) -> None:
    """``@`` without a ``:`` before it is a hub revision: a message quoting it keeps it whole."""
    with pytest.raises(SourceError) as info:
        parse_source(uri + "?bogus=1")
    assert uri in str(info.value)
