"""depthlab.units: the one number reader and the one value formatter every layer uses."""

import math

import pytest

from depthlab import rundir
from depthlab.units import LN2, finite_or, finite_or_none, fmt_value, number_or_none


@pytest.mark.parametrize("raw,want", [
    (2.2719, 2.2719), (3, 3.0), ("4.1", 4.1), ("1e-3", 0.001), (True, 1.0),  # numbers and their strings
    (None, None), ("", None), ("abc", None), ([1.0], None), ({"nats": 2.0}, None),  # not numbers
    (math.nan, None), ("nan", None), (math.inf, None), ("-inf", None), ("Infinity", None),  # not finite
])
def test_finite_or_none(raw, want):
    assert finite_or_none(raw) == want


def test_the_readers_agree_on_numbers_and_differ_only_on_non_finite():
    assert number_or_none("2.5") == finite_or_none("2.5") == finite_or("2.5", math.nan) == 2.5
    assert number_or_none("x") is None and finite_or("x", math.inf) == math.inf
    assert math.isnan(number_or_none("nan")) and number_or_none("inf") == math.inf  # kept: "diverged" != missing
    assert math.isnan(finite_or("nan", math.nan)) and finite_or(None, math.inf) == math.inf
    assert rundir.finite_or_none is finite_or_none  # the run-directory reader re-exports the same function


def test_ln2_turns_nats_into_bits():
    assert LN2 == math.log(2.0)
    assert 4.1743872699 / LN2 == pytest.approx(6.0223, abs=1e-4)  # ln 65 nats = log2 65 bits (65 symbols)


@pytest.mark.parametrize("value,shown", [
    # the report-table style (spec None): significant digits by size, separators for thousands
    (3098.5297, "3,099"), (104384.12, "104,384"), (198.288, "198.3"), (2.14631, "2.1463"), (2.5, "2.5"),
    (0.90312, "0.9031"), (0.0, "0"), (4.5e-05, "4.500e-05"), (2.5e12, "2.500e+12"), (1234, "1234"),
    (123456, "123,456"), (-98765, "-98,765"), (True, "true"), (None, "—"), ("prenorm", "prenorm"),
    ([1, 2], "[1, 2]"), ({"a": 1}, '{"a": 1}'), (math.nan, "nan"), (math.inf, "inf"), (-math.inf, "-inf"),
])
def test_fmt_value_table_style(value, shown):
    assert fmt_value(value) == shown


@pytest.mark.parametrize("value,shown", [(3098.5297, "3,099"), (104384.12, "104,384"), (198.288, "198.3"),
                                         (2.14631, "2.1463"), (0.90312, "0.9031"), (4.5e-05, "4.500e-05"),
                                         (1234, "1234"), (123456, "123,456")])
def test_numbers_without_useless_decimals(value, shown):
    assert fmt_value(value) == shown


@pytest.mark.parametrize("value,spec,missing,shown", [
    (2.27186, ".3f", "—", "2.272"), (None, ".3f", "—", "—"),  # sweep claims: fixed decimals
    (0.0012345, ".3e", "n/a", "1.234e-03"), (None, ".3e", "n/a", "n/a"),  # the probe table
    (0.001, "g", "None", "0.001"), (3e-4, "g", "None", "0.0003"), (16, "g", "None", "16"),  # run names
    (1000000, "g", "None", "1000000"), (True, "g", "None", "True"), (None, "g", "None", "None"),  # exact non-floats
    (math.nan, ".3f", "—", "nan"), (-math.inf, "g", "None", "-inf"),
])
def test_fmt_value_with_a_format_spec(value, spec, missing, shown):
    assert fmt_value(value, spec, missing=missing) == shown


def test_fmt_value_is_what_the_sweep_names_runs_with(tmp_path):
    from depthlab import sweep

    spec = sweep.build_spec(None, None, ["train.learning_rate=0.0003,0.001", "model.n_layer=2,16"], {}, None)
    names = [p.name for p in sweep.expand(spec, tmp_path)]
    assert names == ["learning_rate-0.0003_n_layer-02", "learning_rate-0.0003_n_layer-16",
                     "learning_rate-0.001_n_layer-02", "learning_rate-0.001_n_layer-16"]


def test_counted_and_agree_make_a_count_and_its_verb_agree():
    from depthlab.units import agree, counted

    assert [f"{counted(n, 'line')} {agree(n, 'is', 'are')}" for n in (0, 1, 2, 1000)] == [
        "0 lines are", "1 line is", "2 lines are", "1,000 lines are"]


@pytest.mark.parametrize("se, shown", [(None, ""), (0.0123, " ± 0.012"), (0.0004, " ± 0.0004"),
                                       (0.00004, " ± 0.00004"), (0.0, " ± 0.000"), (1e-9, " ± 0.000000")])
def test_plus_minus_keeps_a_small_error_bar_from_reading_as_none(se, shown):
    from depthlab.units import plus_minus

    assert plus_minus(se) == shown
