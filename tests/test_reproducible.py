"""trainers.reproducible: which command pins the CPU kernels, and how a process reports them."""

import pytest

from trainers import reproducible


@pytest.mark.parametrize(
    "argv,pinned",
    [
        (["python", "-m", "trainers.demo", "--workdir=runs/demo"], True),
        ([".venv/bin/python", "-u", "-m", "trainers.demo"], True),
        (["python", "-m", "trainers.finetune", "--dataset=digits"], False),
        (["python", "-m", "pytest", "tests/test_demo.py", "-k", "trainers.demo"], False),
        (["python", "-c", "import trainers.demo"], False),
        ([], False),
    ],
)
def test_only_the_demo_command_is_pinned(argv, pinned):
    assert reproducible.is_pinned_command(argv) is pinned


def test_describe_names_every_variable_that_differs(monkeypatch):
    monkeypatch.setattr(reproducible, "_onednn_ops_on", lambda: False)
    for name, value in reproducible.ENVIRONMENT.items():
        monkeypatch.setenv(name, value)
    assert reproducible.describe() == "pinned (TF_ENABLE_ONEDNN_OPTS=0, ONEDNN_MAX_CPU_ISA=AVX2)"
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA")
    assert reproducible.describe() == "not pinned (ONEDNN_MAX_CPU_ISA=(unset))"
    # TensorFlow decided on its oneDNN ops when it loaded: the variable set later does not count.
    monkeypatch.setattr(reproducible, "_onednn_ops_on", lambda: True)
    assert reproducible.describe() == "not pinned (ONEDNN_MAX_CPU_ISA=(unset), oneDNN custom ops on)"
