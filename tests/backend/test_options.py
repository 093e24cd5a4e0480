"""ringzip.Options is the C++ Options struct, validated: the same fields in the same order, the
same defaults, every field documented, every bad value refused by name, and values that survive
the trip to C++ and back, the environment, pickling and replace()."""
import copy
import datetime
import pickle

import pytest

import ringzip
from ringzip import _C
from ringzip.options import _bound_fields

NAMES = [name for name, _ in _bound_fields(_C.Options)]


def test_fields_defaults_and_docs_come_from_the_cpp_struct():
    import dataclasses

    assert [f.name for f in dataclasses.fields(ringzip.Options)] == NAMES
    assert {"codec", "algorithm", "bucket_size", "timeout", "transport", "check"} <= set(NAMES)
    c, py = _C.Options(), ringzip.Options()
    for name in NAMES:
        assert getattr(py, name) == getattr(c, name), name
        assert f"\n{name}: " in ringzip.Options.__doc__, f"{name} is not documented"
    assert (py.codec, py.bucket_size, py.min_numel, py.topk_block) == ("none", 512, 65536, 1 << 20)
    from ringzip import reference  # the test oracle's own defaults agree

    assert (reference.BUCKET, reference.TOPK_BLOCK) == (py.bucket_size, py.topk_block)


def test_the_readmes_table_has_every_field():
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    for name in NAMES:
        env = "RINGZIP_" + name.upper() + ("_S" if name == "timeout" else "")
        assert f"| `{name}` | `{env}` |" in readme, f"README's options table lacks {name}"


# (field, value, error, text the message must hold)
BAD = [
    ("algorithm", "bogus", ValueError, "algorithm 'bogus'"),
    ("codec", "q3", ValueError, "q3"),
    ("codec", "auto:zz", ValueError, "auto:zz"),
    ("codec", 4, TypeError, "codec"),
    ("rounding", "up", ValueError, "rounding 'up'"),
    ("hierarchy", "rack", ValueError, "hierarchy 'rack'"),
    ("check", "sometimes", ValueError, "check 'sometimes'"),
    ("transport", "rdma", ValueError, "transport 'rdma'"),
    ("bucket_size", 0, ValueError, "bucket_size"),
    ("min_numel", -1, ValueError, "min_numel"),
    ("topk_block", -1, ValueError, "topk_block"),
    ("connections", -1, ValueError, "connections"),
    ("connections", 65, ValueError, "connections must be 0 .chosen per peer. or in 1..64"),
    ("link_gbit", -1.0, ValueError, "link_gbit must be 0 .not known. or a link's rate"),
    ("link_gbit", float("nan"), ValueError, "link_gbit"),
    ("link_gbit", float("inf"), ValueError, "link_gbit"),
    ("link_gbit", "1", TypeError, "link_gbit"),
    ("link_gbit", True, TypeError, "link_gbit"),
    ("seed", -1, ValueError, "seed"),
    ("seed", True, TypeError, "seed"),
    ("bucket_size", "512", TypeError, "bucket_size"),
    ("timeout", 5, TypeError, "timeout"),
    ("error_feedback", "yes", TypeError, "error_feedback"),
    ("codec", None, TypeError, "codec must be str, got None"),
    ("bucket_size", None, TypeError, "bucket_size must be int, got None"),
]


@pytest.mark.parametrize("field,value,error,text", BAD, ids=[f"{f}={v!r}" for f, v, _, _ in BAD])
def test_a_bad_value_is_refused_by_name(field, value, error, text):
    with pytest.raises(error, match=text.replace("(", r"\(")) as e:
        ringzip.Options(**{field: value})
    assert "ringzip" in str(e.value)
    with pytest.raises(error):
        ringzip.Options().replace(**{field: value})


def test_a_value_bad_with_another_is_refused():
    with pytest.raises(ValueError, match="bucket 12"):  # q-codec buckets are multiples of 8
        ringzip.Options(codec="q4", bucket_size=12)


def test_every_algorithm_name_of_either_family_is_accepted():
    for algo in ("auto", "ring", "rd", "direct", "star", "hd", "tree", "sra", "sparse", "recursive_doubling"):
        assert ringzip.Options(algorithm=algo).algorithm == algo


def _custom():
    return ringzip.Options(timeout=datetime.timedelta(seconds=7), algorithm="sra", codec="auto:q8", bucket_size=256,
                           rounding="nearest", min_numel=9, topk_block=0, error_feedback=False, seed=5,
                           transport="gloo", connections=3, link_gbit=2.5, hierarchy="flat", check="on")


def test_values_survive_cpp_pickle_copy_and_replace():
    o = _custom()
    assert sorted(k for k in NAMES if getattr(o, k) != getattr(ringzip.Options(), k)) == sorted(NAMES)
    assert ringzip.Options._from_c(o._as_c()) == o
    assert pickle.loads(pickle.dumps(o)) == o and copy.deepcopy(o) == o
    assert o.replace(codec="q4") == ringzip.Options(**{**{k: getattr(o, k) for k in NAMES}, "codec": "q4"})
    assert repr(o).startswith("Options(")
    with pytest.raises(TypeError, match="nosuch"):
        o.replace(nosuch=1)


def test_every_field_reads_its_environment_variable(monkeypatch):
    o = _custom()
    for name in NAMES:
        v = getattr(o, name)
        text = (str(v.total_seconds()) if name == "timeout" else str(int(v)) if isinstance(v, bool) else str(v))
        monkeypatch.setenv("RINGZIP_" + name.upper() + ("_S" if name == "timeout" else ""), text)
    assert ringzip.Options.from_env() == o
    assert ringzip.Options.from_env(ringzip.Options()) == ringzip.Options()  # explicit options win
    monkeypatch.setenv("RINGZIP_BUCKET_SIZE", "many")
    with pytest.raises(ValueError, match="RINGZIP_BUCKET_SIZE"):
        ringzip.Options.from_env()
