"""``blinkflow.allreduce`` & co. dispatch on the tensor's type: numpy to the runtime, a framework's
tensors to the binding registered for it. The dispatcher itself imports no framework."""
import ast
import pathlib
import sys
import types

import blinkflow
from blinkflow import api


def test_a_registered_binding_gets_its_frameworks_tensors(monkeypatch):
    framework = types.ModuleType("fakeframework")
    framework.Tensor = type("Tensor", (), {"__module__": "elsewhere"})  # told by the binding, not by module
    binding = types.ModuleType("fakebinding")
    binding.accepts = lambda value: isinstance(value, framework.Tensor)
    binding.allreduce = lambda tensor, **kwargs: ("bound", kwargs["name"])
    monkeypatch.setitem(sys.modules, "fakeframework", framework)
    monkeypatch.setitem(sys.modules, "fakebinding", binding)
    monkeypatch.setattr(api, "_bindings", dict(api._bindings))
    monkeypatch.setattr(api, "_modules", dict(api._modules))
    blinkflow.register_binding(["fakeframework"], "fakebinding")
    assert blinkflow.allreduce(framework.Tensor(), name="x") == ("bound", "x")


def test_tensorflow_is_registered_by_the_package_not_imported_by_the_dispatcher():
    assert api._bindings["tensorflow"] == api._bindings["keras"] == "blinkflow.tensorflow.ops"
    tree = ast.parse(pathlib.Path(api.__file__).read_text())
    imported = {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    assert not any("tensorflow" in name for name in imported), imported
