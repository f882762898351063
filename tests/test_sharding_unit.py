"""In-process checks of mesh arithmetic and sharding rules (no extra devices needed).

Layouts for meshes bigger than this process's one CPU device are checked on an `AbstractMesh`,
which has axis names and sizes but no devices: sharding specs are pure functions of those.
"""

import jax
import jax.numpy as jnp
import optax
import pytest
from jax.sharding import AbstractMesh, AxisType
from jax.sharding import PartitionSpec as P

from configs import mesh as mesh_config
from specjax import sharding as sh
from specjax.decoding import AutoregressiveDecoder, ShardedDecoder, make_warper
from specjax.models import NgramLM, TransformerConfig, TransformerLM
from specjax.models.ngram import LengthState


def abstract_mesh(data, model):
    return AbstractMesh((data, model), sh.DEFAULT_AXES, axis_types=(AxisType.Auto,) * 2)


def tiny_llama(vocab=256, kv_heads=2):
    config = TransformerConfig.llama(
        vocab, num_layers=1, num_heads=4, num_kv_heads=kv_heads, embed_dim=32, mlp_dim=64
    )
    return TransformerLM(config)


def specs(tree):
    return jax.tree.map(lambda s: s.spec, tree)


@pytest.mark.parametrize(
    "shape, devices, expected",
    [((-1, 2), 8, (4, 2)), ((2, -1), 8, (2, 4)), ((-1, 1), 1, (1, 1)), ((4, 2), 8, (4, 2))],
)
def test_resolve_mesh_shape_fills_minus_one(shape, devices, expected):
    assert sh.resolve_mesh_shape(shape, devices) == expected


@pytest.mark.parametrize(
    "shape, devices, message",
    [
        ((3, -1), 8, "not divisible"),
        ((-1, -1), 8, "at most one -1"),
        ((4, 4), 8, "needs 16 devices"),
        ((0, 2), 8, ">= 1 or -1"),
        ((-1, 2), 0, "at least one device"),  # was the mesh (0, 2)
    ],
)
def test_resolve_mesh_shape_rejects_bad_shapes(shape, devices, message):
    with pytest.raises(ValueError, match=message):
        sh.resolve_mesh_shape(shape, devices)


def test_mesh_shapes_that_are_not_integers_are_refused():
    # int() read 1.9 as 1 (a 1x4 mesh for (1.9, 4)); make_mesh(4) failed unpacking an int.
    for shape in ((1.9, 4), (True, 4), ("2", 4)):
        with pytest.raises(TypeError, match="mesh shape entries must be integers"):
            sh.resolve_mesh_shape(shape, 4)
    with pytest.raises(TypeError, match="mesh shape must be a sequence of axis sizes"):
        sh.make_mesh(4)
    with pytest.raises(ValueError, match="devices is empty"):  # was an IndexError
        sh.make_mesh((-1, 1), devices=[])


def test_make_mesh_on_one_device_has_auto_axes():
    mesh = sh.make_mesh((-1, 1))
    assert dict(mesh.shape) == {"data": 1, "model": 1}
    assert mesh.axis_types == (AxisType.Auto, AxisType.Auto)
    with pytest.raises(ValueError, match="differ in length"):
        sh.make_mesh((1,), ("data", "model"))
    with pytest.raises(ValueError, match="distinct"):
        sh.make_mesh((1, 1), ("data", "data"))


def test_fit_spec_drops_only_non_dividing_axes():
    sizes = {"data": 4, "model": 2}
    assert sh.fit_spec(P(None, "model"), (64, 128), sizes) == P(None, "model")
    # A 259-token byte vocabulary cannot split in two: that dimension is replicated.
    assert sh.fit_spec(P("model", None), (259, 64), sizes) == P(None, None)
    assert sh.fit_spec(P(("data", "model")), (16,), sizes) == P(("data", "model"))
    assert sh.fit_spec(P(("data", "model")), (12,), sizes) == P(None)
    assert sh.fit_spec(P("data"), (8, 3), sizes) == P("data", None)  # padded with None
    with pytest.raises(ValueError, match="more entries"):
        sh.fit_spec(P("data", None), (8,), sizes)


def test_target_params_split_megatron_style_on_4x2():
    model = tiny_llama()
    params = jax.eval_shape(model.init_params, jax.random.PRNGKey(0))
    got = specs(sh.param_shardings(model, params, abstract_mesh(4, 2), sh.DEFAULT_RULES))
    attn, mlp = got["block_0"]["attn"], got["block_0"]["mlp"]
    assert attn["query"]["kernel"] == P(None, "model", None)  # [embed, heads, head_dim]
    assert attn["key"]["kernel"] == P(None, "model", None)  # 2 kv heads over 2 devices
    assert attn["out"]["kernel"] == P("model", None, None)  # [heads, head_dim, embed]
    assert mlp["up"]["kernel"] == P(None, "model") and mlp["down"]["kernel"] == P("model", None)
    assert got["embed"]["embedding"] == P("model", None)
    assert got["head"]["kernel"] == P(None, "model")
    assert got["final_norm"]["scale"] == P(None)


def test_non_dividing_axes_fall_back_to_replication_on_2x4():
    model = tiny_llama(vocab=259, kv_heads=2)
    params = jax.eval_shape(model.init_params, jax.random.PRNGKey(0))
    got = specs(sh.param_shardings(model, params, abstract_mesh(2, 4), sh.DEFAULT_RULES))
    assert got["block_0"]["attn"]["query"]["kernel"] == P(None, "model", None)  # 4 heads / 4
    assert got["block_0"]["attn"]["key"]["kernel"] == P(None, None, None)  # 2 kv heads / 4
    assert got["embed"]["embedding"] == P(None, None)  # 259 / 4


def test_data_parallel_rules_replicate_every_parameter():
    model = tiny_llama()
    params = jax.eval_shape(model.init_params, jax.random.PRNGKey(0))
    rules = sh.data_parallel_rules(sh.DEFAULT_RULES)
    assert dict(rules)["batch"] == "data"
    got = sh.param_shardings(model, params, abstract_mesh(4, 2), rules)
    assert all(s.spec == P(*([None] * len(s.spec))) for s in jax.tree.leaves(got))


def test_parameter_free_and_table_models_are_replicated():
    params = {"log_probs": jax.ShapeDtypeStruct((256, 256), jnp.float32)}
    got = sh.param_shardings(NgramLM(256), params, abstract_mesh(4, 2), sh.DEFAULT_RULES)
    assert got["log_probs"].spec == P()


def test_param_shardings_rejects_foreign_params():
    with pytest.raises(ValueError, match="structure of model.logical_axes"):
        sh.param_shardings(tiny_llama(), {"w": jnp.zeros(3)}, abstract_mesh(4, 2), sh.DEFAULT_RULES)


def test_rules_must_name_mesh_axes():
    rules = sh.DEFAULT_RULES[:2] + (("mlp", "tensor"),)
    with pytest.raises(ValueError, match="'tensor'"):
        sh.check_rules(abstract_mesh(4, 2), rules)


@pytest.mark.parametrize(
    "rules, message",
    [
        # A misspelt logical axis would leave the KV heads whole, silently.
        ((("batch", "data"), ("kv_head", "model")), r"logical axis 'kv_head', which none"),
        # A later rule for an axis is only tried when an earlier one's mesh axes are taken:
        # after None, or the same axes, it can never apply.
        ((("mlp", None), ("mlp", "model")), r"can never apply.*'mlp'.*None, which always"),
        ((("mlp", "model"), ("mlp", "model")), r"can never apply.*the same mesh axes"),
        ((("batch", "data", "model"),), "pair"),
        (("batch",), "pair"),
        (((1, "data"),), "pair"),
        ((("batch", 0),), "give None, a mesh axis name or a tuple"),
        ((("batch", ("data", None)),), "give None, a mesh axis name or a tuple"),
    ],
)
def test_malformed_misspelt_or_repeated_rules_are_named(rules, message):
    mesh = abstract_mesh(4, 2)
    with pytest.raises(ValueError, match=message):
        sh.check_rules(mesh, rules, sh.declared_axes([tiny_llama()]))


def test_fallback_rules_for_one_axis_are_kept_as_flax_applies_them():
    # MaxText-style: `embed` on `model` where free, else on `data` (the vocab holds `model`).
    rules = (("batch", "data"), ("vocab", "model"), ("embed", "model"), ("embed", "data"))
    mesh = abstract_mesh(4, 2)
    sh.check_rules(mesh, rules, sh.declared_axes([tiny_llama()]))
    assert sh.logical_sharding(("vocab", "embed"), (16, 8), mesh, rules).spec == P("model", "data")
    assert sh.logical_sharding(("embed", "mlp"), (8, 16), mesh, rules).spec == P("model", None)


def test_declared_axes_are_specjaxs_own_and_the_models():
    class Experts:  # a custom model declaring an axis of its own
        def logical_axes(self):
            return {"w": P("experts", "embed"), "b": P(None)}

    assert sh.declared_axes([]) == sh.LOGICAL_AXES
    assert sh.declared_axes([Experts()]) == sh.LOGICAL_AXES | {"experts"}
    assert "experts" not in sh.LOGICAL_AXES
    sh.check_rules(abstract_mesh(4, 2), (("experts", "model"),), sh.declared_axes([Experts()]))
    # A model's own axes are accepted without `declared` too (the per-array helpers).
    sh.check_rules(abstract_mesh(4, 2), sh.DEFAULT_RULES + (("experts", "model"),))


def test_kv_cache_splits_rows_and_heads():
    mesh = abstract_mesh(4, 2)
    cache = jax.eval_shape(lambda: tiny_llama().init_state(8, 16))
    got = sh.state_shardings(cache, mesh, sh.DEFAULT_RULES)
    assert got.keys[0].spec == P("data", None, "model", None)
    assert got.values[0].spec == P("data", None, "model", None)
    assert got.lengths.spec == P("data")
    other = sh.state_shardings(LengthState(jnp.zeros(8, jnp.int32)), mesh, sh.DEFAULT_RULES)
    assert other.lengths.spec == P("data")


def test_adam_moments_follow_their_parameters():
    model = tiny_llama()
    params = jax.eval_shape(model.init_params, jax.random.PRNGKey(0))
    mesh = abstract_mesh(4, 2)
    p_sh = sh.param_shardings(model, params, mesh, sh.DEFAULT_RULES)
    opt_state = jax.eval_shape(optax.adamw(1e-3).init, params)
    got = sh.opt_state_shardings(opt_state, params, p_sh, mesh)
    adam = got[0]
    assert specs(adam.mu) == specs(p_sh) and specs(adam.nu) == specs(p_sh)
    assert adam.count.spec == P()


def test_mesh_config_parses_axis_sizes():
    config = mesh_config.get_config("model=2")
    assert tuple(config.shape) == (-1, 2) and tuple(config.axes) == ("data", "model")
    assert sh.rules_from_config(config) == sh.DEFAULT_RULES
    assert tuple(mesh_config.get_config("data=4,model=2").shape) == (4, 2)
    mesh = sh.mesh_from_config(mesh_config.get_config())
    assert dict(mesh.shape) == {"data": 1, "model": 1}
    with pytest.raises(ValueError, match="data=N or model=N"):
        mesh_config.get_config("tensor=2")


def test_put_and_to_host_round_trip():
    mesh = sh.make_mesh((-1, 1))
    tree = {"a": jnp.arange(6).reshape(2, 3), "b": 1.5}
    placed = sh.put(
        tree, {"a": sh.batch_sharding(mesh, sh.DEFAULT_RULES, (2, 3)), "b": sh.replicated(mesh)}
    )
    back = sh.to_host(placed)
    assert back["a"].tolist() == [[0, 1, 2], [3, 4, 5]] and float(back["b"]) == 1.5


def test_sharded_decoder_checks_its_arguments():
    mesh = sh.make_mesh((-1, 1))
    decoder = AutoregressiveDecoder(tiny_llama(), make_warper(temperature=0.0), cache_len=32)
    with pytest.raises(TypeError, match="decoder of the loop driver"):
        ShardedDecoder(object(), mesh)
    with pytest.raises(ValueError, match="names mesh axis 'tensor'"):
        ShardedDecoder(decoder, mesh, rules=(("batch", "tensor"),))
    with pytest.raises(ValueError, match="logical axis 'kv_head', which none"):
        ShardedDecoder(decoder, mesh, rules=(("batch", "data"), ("kv_head", "model")))
    with pytest.raises(TypeError, match="rules must be a sequence"):
        ShardedDecoder(decoder, mesh, rules="batch")
    # Lists (a config's JSON form) are taken as pairs.
    assert ShardedDecoder(decoder, mesh, rules=[["batch", "data"]]).rules == (("batch", "data"),)
    both = ShardedDecoder(decoder, mesh, rules=[["batch", ["data", "model"]]])
    assert both.rules == (("batch", ("data", "model")),)
    with pytest.raises(TypeError, match="replicate_draft must be True or False"):
        ShardedDecoder(decoder, mesh, replicate_draft="no")  # a truthy string
    sharded = ShardedDecoder(decoder, mesh)
    abstract = jax.eval_shape(decoder.model.init_params, jax.random.PRNGKey(0))
    for kwargs, message in (
        (dict(batch=0, prompt_width=16), "batch must be an integer >= 1"),
        (dict(batch=2, prompt_width=0), "prompt_width must be an integer >= 1"),
        (dict(batch=2, prompt_width=100), "prompt_width=100 exceeds the decoder's cache_len=32"),
    ):
        with pytest.raises(ValueError, match=message):
            sharded.lower(abstract, **kwargs)
    with pytest.raises(ValueError, match=r"params for 1 model\(s\), got 2"):
        sharded.generate({}, {}, prompts=[[1, 2]], key=jax.random.PRNGKey(0), max_new_tokens=2)


def test_a_sharded_decoder_needs_a_mesh():
    from specjax.decoding import AutoregressiveDecoder, ShardedDecoder, make_warper
    from specjax.testing import tiny_llama

    decoder = AutoregressiveDecoder(tiny_llama(5, 0)[0], make_warper(0.0), cache_len=16)
    for mesh in (None, (2, 2)):  # an AttributeError before
        with pytest.raises(TypeError, match="mesh must be a jax.sharding.Mesh"):
            ShardedDecoder(decoder, mesh)
