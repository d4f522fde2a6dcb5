"""Where a step's time goes: benchmarks/kernels.py (the oneDNN kernels a step runs, parsed from
ONEDNN_VERBOSE lines) and benchmarks/op_profile.py (TensorFlow's profiler by operation type), on
the trainers' own step at a tiny size."""

import os

import pytest
from benchmark_runs import FRAMEWORK_VARIABLE, read_json, table_rows

# This process loaded TensorFlow first (conftest.py): the benchmarks must leave PyTorch out.
os.environ[FRAMEWORK_VARIABLE] = "tf"

from benchmarks import flops, inference, kernels, op_profile  # noqa: E402
from keras_vit import onednn_graph, xla_inference  # noqa: E402


def test_op_types_fall_into_their_groups():
    assert op_profile.group("_MklMatMul") == "matmul"
    assert op_profile.group("_MklBatchMatMulV2") == "matmul"
    assert op_profile.group("Cast") == "cast"
    assert op_profile.group("Tanh") == "element-wise and other"
    assert op_profile.group("_MklNativeConv2DBackpropFilter") == "matmul"  # the patch embedding's gradient


@pytest.mark.parametrize("avx512", [True, False])
def test_the_inference_kernels_are_those_of_keras_vits_call_on_tensorflows_graph(monkeypatch, avx512):
    # Where keras_vit compiles its inference call with XLA (an x86 CPU without AVX-512), oneDNN
    # prints no line for it: the tf side must then run the call on TensorFlow's graph, under that
    # row's name, as op_profile does; elsewhere keras_vit's own call.
    monkeypatch.setattr(xla_inference, "cpu_prefers_xla", lambda: not avx512)
    built = []
    monkeypatch.setattr(inference, "local_step", lambda kind, *rest: built.append(kind))
    args = kernels.parse_args(["--step=inference", "--inference_dtype=float32", "--child=tf"])
    kernels._build(args, flops.shape("ViT-Ti_16", num_layers=1))
    expected = "keras_vit" if avx512 else inference.ON_GRAPH
    assert built == [expected] and inference.profiled_kind("bfloat16") == expected
    assert kernels.side_name("tf", args) == ("keras_vit TF" if avx512 else "keras_vit TF graph")
    assert kernels.side_name("torch", args) == "timm eager"


# Lines as TensorFlow's oneDNN (v1, "src:bf16") and PyTorch's sgemm ("src_f32") print them.
_BF16 = "src:bf16::blocked:abc::f0 wei:bf16::blocked:abc::f0 dst:bf16::blocked:abc::f0"
_F32 = "src:f32::blocked:abcd::f0 dst:f32::blocked:abcd::f0"
_MATMUL = f"onednn_verbose,v1,primitive,exec,cpu,matmul,brg_matmul:avx512_core_bf16,undef,{_BF16},,,"
_SOFTMAX = (
    f"onednn_verbose,v1,primitive,exec,cpu,softmax,jit:avx512_core_bf16,forward_inference,{_F32},,axis:3,"
)
VERBOSE = [
    "onednn_verbose,v1,info,cpu,isa:Intel AVX-512 with Intel DL Boost and bfloat16 support",
    _MATMUL + "16x197x192:1x192x192,2.0",
    "benchmark-kernels: begin",
    _MATMUL + "16x197x192:1x192x192,3.0",
    _MATMUL + "16x197x192:1x192x192,1.0",
    f"onednn_verbose,v1,primitive,exec,cpu,inner_product,x64:gemm:jit,forward_training,{_BF16},,,mb197ic192oc768,1.0",
    _SOFTMAX + "16x3x197x197,2.0",
    "onednn_verbose,v1,primitive,exec,cpu,gemm_api,,undef,src_f32::blocked:ab:f0 wei_f32::blocked:ab:f0,,,"
    + "16x37:37x192,1.0",
    "benchmark-kernels: end",
    _SOFTMAX + "16x3x197x197,9.0",
]


def test_kernel_lines_are_summed_per_kernel_and_matmul_shape_between_the_markers():
    rows, matmuls, isa = kernels.parse(VERBOSE, steps=2)
    assert isa == "Intel AVX-512 with Intel DL Boost and bfloat16 support"
    # Only the lines between the markers (the warm-up's and the later softmax are left out).
    first = rows[0]
    assert (first["primitive"], first["implementation"], first["dtype"]) == (
        "matmul",
        "brg_matmul:avx512_core_bf16",
        "bf16",
    )
    assert first["calls"] == 1 and first["ms"] == 2 and first["share"] == pytest.approx(4 / 8)
    softmax = next(r for r in rows if r["primitive"] == "softmax")
    assert softmax["dtype"] == "f32" and softmax["ms"] == 1
    sgemm = next(r for r in rows if r["primitive"] == "gemm_api")
    assert sgemm["implementation"] == "(gemm)" and sgemm["dtype"] == "f32"
    by_shape = {m["shapes"]: m for m in matmuls}
    # 2 x 16 x 197 x 192 x 192 FLOPs per call (the weights broadcast over the batch), 2 calls in 4 ms.
    assert by_shape["16x197x192:1x192x192"]["gflops_per_s"] == pytest.approx(
        2 * 2 * 16 * 197 * 192 * 192 / 4e-3 / 1e9
    )
    assert kernels.matmul_flops("mb197ic192oc768") == 2 * 197 * 192 * 768
    assert by_shape["mb197ic192oc768"]["share"] == pytest.approx(1 / 6)


@pytest.mark.slow
def test_kernels_and_the_training_op_profile_run_keras_vits_step(tmp_path):
    kernels.main(
        [
            "--frameworks=tf",
            "--image_size=32",
            "--batch_size=2",
            "--num_layers=1",
            "--steps=1",
            "--mixed_precision=bfloat16",
            f"--out={tmp_path}/kernels.json",
        ]
    )
    data = read_json(tmp_path / "kernels.json")
    rows = table_rows(data)
    assert all(r["contestant"] == "keras_vit TF" for r in rows)
    # The trainer's bfloat16 step runs its products on oneDNN in bfloat16, the attention's
    # softmax in float32 (Keras computes it so).
    if onednn_graph.onednn_has_bfloat16():  # without AVX-512 oneDNN has no bfloat16 kernels
        assert {"bf16"} <= {r["dtype"] for r in rows if r["primitive"] in ("matmul", "inner_product")}
    assert sum(r["share"] for r in rows) == pytest.approx(1)
    assert all(r["gflops_per_s"] > 0 for r in table_rows(data, 1))
    op_profile.main(
        [
            "--step=train",
            "--variant=ViT-Ti_16",
            "--image_size=32",
            "--batch_size=2",
            "--num_layers=1",
            "--calls=1",
            f"--out={tmp_path}/op_profile.json",
        ]
    )
    profile = read_json(tmp_path / "op_profile.json")
    assert profile["tables"][0]["title"] == "Self time by operation type, keras_vit Trainer TF bfloat16"
    # The backward pass is in the step: gradient ops of the layer norms and of the bias adds.
    rows = {r["op_type"]: r for r in table_rows(profile)}
    assert {"RsqrtGrad", "BiasAddGrad"} <= set(rows)
    # The GELU's two XLA-compiled kernels (keras_vit/fused_gelu.py, on oneDNN's CPUs), which
    # TensorFlow's op statistics leave out: read from the trace, their own row.
    if onednn_graph.onednn_on():
        assert rows[op_profile.XLA_ROW]["group"] == "XLA-compiled"
        assert rows[op_profile.XLA_ROW]["ms_per_call"] > 0


def test_xla_kernel_names_fall_into_their_groups():
    assert op_profile.xla_kernel_kind("MatMul_1.24") == "MatMul_1"
    assert op_profile.xla_kernel_kind("add_multiply_fusion.10") == "add_multiply_fusion"
    assert op_profile.group("MatMul_1") == "matmul"
    assert op_profile.group("dot") == "matmul"  # the attention's products
    assert op_profile.group("convolution") == "matmul"  # the patch embedding
    assert op_profile.group("dot_add_fusion") == "matmul"
    assert op_profile.group("add_multiply_fusion") == "element-wise and other"  # the GELU
    assert op_profile.group("convert_multiply_fusion") == "cast"
    assert op_profile.group("wrapped_convert") == "cast"  # bfloat16 weights to float32, unfused
    assert op_profile.group("convert") == "cast"
    assert op_profile.group("wrapped_reduce-window") == "element-wise and other"
    # A product's row carries its shape after its kind.
    assert op_profile.group("MatMul 197x192 by 192x768") == "matmul"
    assert op_profile.group("bitcast_dot_fusion 1x192 by 192x192") == "matmul"
    assert op_profile.group(op_profile.IDLE_ROW) == "between kernels"


def _space(lines):
    """An XSpace of one plane whose lines hold events (name, start µs, duration µs)."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    plane = space.planes.add(name="/host:CPU")
    ids = {}
    for line_name, events in lines.items():
        line = plane.lines.add(name=line_name)
        for name, start, duration in events:
            if name not in ids:
                ids[name] = len(ids) + 1
                plane.event_metadata[ids[name]].id = ids[name]
                plane.event_metadata[ids[name]].name = name
            line.events.add(metadata_id=ids[name], offset_ps=start * 10**6, duration_ps=duration * 10**6)
    return space


def test_xla_kernels_are_the_events_inside_an_xla_programs_spans_on_their_thread():
    space = _space(
        {
            "python": [
                ("EagerExecute", 0, 100),  # TensorFlow's own work around the program: not a kernel
                (op_profile.XLA_EXECUTION, 10, 80),
                ("broadcast_add_fusion.1", 12, 3),
                ("MatMul.74", 20, 30),
                ("end: MatMul.74", 50, 1),
                ("MatMul.76", 95, 4),  # after the program's span on this thread
            ],
            "tf_numa_-1_Eigen": [
                ("ThunkExecutor::Execute", 20, 40),
                ("dot.24", 21, 10),
                ("SlinkyThreadPool::Await", 31, 5),
                ("MatMul_1.24", 40, 15),
                ("MemoryAllocation", 41, 1),
            ],
        }
    )
    totals, product_flops = op_profile.xla_kernel_us(space)
    # The program's 80 µs: kernels on some thread from 12 to 15 and from 20 to 55, none in the rest.
    idle = {op_profile.IDLE_ROW: 80 - 3 - 35}
    assert totals == {"broadcast_add_fusion": 3, "MatMul": 30, "dot": 10, "MatMul_1": 15, **idle}
    assert product_flops == {}
    # With the program's products, each is a row of its kind and shape, with its FLOPs.
    products = {"MatMul.74": ("197x192 by 192x192", 14_524_416), "dot.24": ("3 x 197x64 by 64x197", 7)}
    totals, product_flops = op_profile.xla_kernel_us(space, products)
    assert totals == {
        "broadcast_add_fusion": 3,
        "MatMul 197x192 by 192x192": 30,
        "dot 3 x 197x64 by 64x197": 10,
        "MatMul_1": 15,
        **idle,
    }
    assert product_flops == {"MatMul 197x192 by 192x192": 14_524_416, "dot 3 x 197x64 by 64x197": 7}


def test_the_time_no_kernel_covers_is_counted_inside_the_span_only():
    # Kernels before, across the start of, inside, overlapping, and after the span (10, 90).
    kernels = [(0, 5), (5, 20), (30, 40), (35, 50), (95, 120), (85, 100)]
    assert op_profile.uncovered_ps((10, 90), kernels) == 10 + 35
    assert op_profile.uncovered_ps((10, 90), []) == 80


# An XLA program's optimised text, cut down: a product of two parameters, the attention's batched
# dot with its right operand contracted on its first free dimension, a convolution, and a
# fusion whose computation holds a dot (the last block's class token through its MLP).
PROGRAM = """HloModule a_inference_call

%fused_computation.7 (param_0.1: f32[192,768], param_1.1: f32[1,192]) -> f32[768] {
  %param_1.1 = f32[1,192]{1,0} parameter(1)
  %param_0.1 = f32[192,768]{1,0} parameter(0)
  %dot.9 = f32[1,768]{1,0} dot(%param_1.1, %param_0.1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %bitcast.1 = f32[768]{0} bitcast(%dot.9)
}

ENTRY %a_inference_call__.77 (arg0.1: f32[1,32,32,3], arg1.1: f32[16,16,3,192]) -> f32[768] {
  %arg0.1 = f32[1,32,32,3]{3,2,1,0} parameter(0), metadata={op_name="XLA_Args"}
  %arg1.1 = f32[16,16,3,192]{3,2,1,0} parameter(1), metadata={op_name="XLA_Args"}
  %arg2.1 = f32[5,192]{1,0} parameter(2)
  %arg3.1 = f32[192,768]{1,0} parameter(3)
  %arg4.1 = f32[3,64,5]{2,1,0} parameter(4)
  %arg5.1 = f32[3,5,64]{2,1,0} parameter(5)
  %convolution.1 = f32[1,2,2,192]{3,2,1,0} convolution(%arg0.1, %arg1.1), dim_labels=b01f_01io->b01f
  %MatMul.74 = f32[5,768]{1,0} dot(%arg2.1, %arg3.1), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_type="MatMul"}
  %dot.24 = f32[3,64,64]{2,1,0} dot(%arg4.1, %arg5.1), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
  %slice.3 = f32[1,192]{1,0} slice(%arg2.1), slice={[0:1], [0:192]}
  ROOT %dot_add_fusion.2 = f32[768]{0} fusion(%arg3.1, %slice.3), kind=kOutput, calls=%fused_computation.7
}
"""  # noqa: E501 (the program's lines as XLA writes them)


def test_an_xla_programs_products_are_read_with_their_shapes_and_flops():
    products = op_profile.hlo_products(PROGRAM)
    assert products == {
        # 2x2 patches of 16x16x3 pixels, each through 192 filters.
        "convolution.1": ("1x32x32x3 by 16x16x3x192", 2 * 4 * 192 * 16 * 16 * 3),
        "MatMul.74": ("5x192 by 192x768", 2 * 5 * 192 * 768),
        # Per head, 64 rows of the left operand (its last dimension contracted) by 64 columns.
        "dot.24": ("3 x 64x5 by 5x64", 2 * 3 * 64 * 64 * 5),
        # The trace names the fusion, not the dot inside it: the fusion carries the dot.
        "dot_add_fusion.2": ("1x192 by 192x768", 2 * 192 * 768),
    }


@pytest.mark.slow
def test_the_inference_op_profile_times_each_xla_kernel_where_keras_vit_compiles_its_call(
    monkeypatch, tmp_path
):
    # Where keras_vit compiles its inference call with XLA (an x86 CPU without AVX-512; made so
    # here on any CPU), the profile is of that call, per XLA kernel.
    monkeypatch.setattr(xla_inference, "cpu_prefers_xla", lambda: True)
    argv = ["--variant=ViT-Ti_16", "--image_size=32", "--batch_size=1", "--num_layers=2", "--calls=2"]
    op_profile.main([*argv, "--dtype=float32", f"--out={tmp_path}/op_profile.json"])
    profile = read_json(tmp_path / "op_profile.json")
    assert profile["tables"][0]["title"] == "Time by XLA kernel, keras_vit TF (XLA-compiled)"
    rows = {r["op_type"]: r for r in table_rows(profile)}
    # The projections and the MLP (TensorFlow's MatMul ops), the attention's batched products
    # and the patch embedding's convolution, each a kernel of its own, named with its shape: at
    # 32 px 5 tokens of 192, 3 heads of 64, 768 wide in the MLP.
    products = {
        "MatMul 5x192 by 192x192",  # the query projection
        "MatMul_1 5x192 by 192x192",  # the key's
        "MatMul 5x192 by 192x768",  # the MLP's first
        "MatMul 5x768 by 768x192",  # and second
        "dot 3 x 5x64 by 64x5",  # each head's queries by its keys
        "dot 3 x 5x5 by 5x64",  # its weights by its values
        "convolution 1x32x32x3 by 16x16x3x192",
    }
    assert products <= set(rows), sorted(rows)
    assert all(rows[k]["group"] == "matmul" and rows[k]["gflop_per_s"] > 0 for k in products)
    (peak_flops,) = profile["matmul_peak_flops"].values()
    for k in products:
        assert rows[k]["of_peak"] == pytest.approx(rows[k]["gflop_per_s"] * 1e9 / peak_flops)
    assert profile["groups"]["element-wise and other"] > 0
    assert sum(r["share"] for r in rows.values()) == pytest.approx(1)
    # --xla_kernels=false: the same call on TensorFlow's graph, per operation type.
    op_profile.main([*argv, "--dtype=float32", "--xla_kernels=false", f"--out={tmp_path}/graph.json"])
    graph = read_json(tmp_path / "graph.json")
    assert graph["tables"][0]["title"] == "Self time by operation type, keras_vit TF graph"
    assert not {"dot", "convolution"} & {r["op_type"] for r in table_rows(graph)}


@pytest.mark.slow  # compiles a two-block ViT-Ti with XLA: about 5 s
def test_the_compiled_calls_products_add_up_to_the_models_flops(monkeypatch):
    """What the rates divide by: the products read from keras_vit's compiled program hold every
    FLOP of the model, its last block computing the class token alone (keras_vit/class_token_only.py)."""
    monkeypatch.setattr(xla_inference, "cpu_prefers_xla", lambda: True)
    shape = flops.shape("ViT-Ti_16", num_layers=2)
    step = inference.keras_step("keras_vit", shape, 64, 1, "float32")
    step()
    products = op_profile.hlo_products(op_profile.xla_program(step))
    t, d, mlp = flops.tokens(64, 16), shape["hidden_size"], shape["mlp_dim"]
    # The last block's query, output projection, attention rows and MLP for one token, not t.
    skipped = (t - 1) * (2 * d * d * 2 + 2 * 2 * t * d + 2 * 2 * d * mlp)
    expected = flops.forward(64, **shape, num_classes=inference.NUM_CLASSES)["total"] - skipped
    assert sum(f for _, f in products.values()) == expected


def test_a_call_without_xla_kernels_is_one_line_that_names_the_other_table(tmp_path):
    # A step XLA does not compile (keras_vit's call where its CPU keeps TensorFlow's graph) gives
    # an empty trace of kernels: a one-line error, not an empty table.
    import tensorflow as tf

    step = tf.function(lambda: tf.reduce_sum(tf.ones((4, 4))))
    with pytest.raises(SystemExit, match="no XLA kernels: run with --xla_kernels=false"):
        op_profile.xla_kernel_stats(step, 1, str(tmp_path))
