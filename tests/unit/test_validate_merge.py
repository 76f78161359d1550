"""Validation runs its suites one chunk of rows at a time and merges the results
(``tasks.validate.merge``): the merged verdict must be the one a single pass over all the
rows would give, which differs from "every chunk passed" for a row count and for ``mostly``."""

from __future__ import annotations

from shardline.tasks.validate import merge


def _res(expectation: str, success: bool, kwargs: dict, **result: object) -> dict:
    return {"suite": "s", "expectation": expectation, "column": kwargs.get("column"),
            "kwargs": kwargs, "success": success, "result": result}


ROWS = "expect_table_row_count_to_be_between"
IN_SET = "expect_column_values_to_be_in_set"
UNIQUE = "expect_column_values_to_be_unique"


def test_row_count_is_summed_over_chunks():
    kw = {"min_value": 100}
    # each chunk alone is below the minimum; the batch is not
    out = merge([[_res(ROWS, False, kw, observed_value=60)],
                 [_res(ROWS, False, kw, observed_value=50)]])
    assert out[0]["success"] is True and out[0]["detail"] == "observed 110"
    out = merge([[_res(ROWS, False, kw, observed_value=60)],
                 [_res(ROWS, False, kw, observed_value=30)]])
    assert out[0]["success"] is False


def test_mostly_is_applied_to_the_summed_counts():
    kw = {"column": "status", "value_set": ["ok"], "mostly": 0.9}
    # chunk 1 fails alone (20 % bad), chunk 2 is clean: 20 of 300 = 6.7 % bad passes
    a = _res(IN_SET, False, kw, unexpected_count=20, element_count=100,
             partial_unexpected_list=["quarantined"])
    b = _res(IN_SET, True, kw, unexpected_count=0, element_count=200)
    out = merge([[a], [b]])
    assert out[0]["success"] is True
    assert out[0]["detail"].startswith("unexpected 20 of 300 rows (6.7%)")
    # the other way round: each chunk passes alone, the batch does not
    c = _res(IN_SET, True, kw, unexpected_count=9, element_count=100)
    d = _res(IN_SET, True, kw, unexpected_count=0, element_count=2)
    e = _res(IN_SET, True, {**kw, "mostly": 0.95}, unexpected_count=9, element_count=100)
    assert merge([[c], [d]])[0]["success"] is True
    assert merge([[e], [e]])[0]["success"] is False


def test_other_expectations_need_every_chunk():
    kw = {"column": "id"}
    ok = _res(UNIQUE, True, kw, unexpected_count=0, element_count=10)
    bad = _res(UNIQUE, False, kw, unexpected_count=2, element_count=10,
               partial_unexpected_list=["x", "x"])
    out = merge([[ok], [bad], [ok]])
    assert out[0]["success"] is False and "unexpected 2 of 30" in out[0]["detail"]
    assert merge([[ok], [ok]])[0]["success"] is True


def test_results_keep_their_order_and_drop_the_raw_result():
    kw = {"min_value": 1}
    chunk = [_res(ROWS, True, kw, observed_value=5),
             _res(UNIQUE, True, {"column": "id"}, unexpected_count=0, element_count=5)]
    out = merge([chunk, chunk])
    assert [r["expectation"] for r in out] == [ROWS, UNIQUE]
    assert all("result" not in r and "detail" in r for r in out)
