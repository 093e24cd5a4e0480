"""The events stream every rank program writes (ringzip.bench.rank.Events): rank 0 writes one JSON
object a line, flushed at once, and "done" last; every other rank writes nothing."""
import json

from ringzip.bench.rank import Events


def test_rank_zero_writes_lines_the_launcher_reads(tmp_path):
    path = tmp_path / "events.jsonl"
    events = Events(str(path), 0)
    assert events
    events.write("begin", index=3)
    assert json.loads(path.read_text()) == {"event": "begin", "index": 3}  # flushed before close
    events.write("row", index=3, row={"time_us": 1.5})
    events.close()
    assert [json.loads(line) for line in path.read_text().splitlines()] == [
        {"event": "begin", "index": 3}, {"event": "row", "index": 3, "row": {"time_us": 1.5}}, {"event": "done"}]


def test_other_ranks_write_nothing(tmp_path):
    path = tmp_path / "events.jsonl"
    events = Events(str(path), 1)
    assert not events
    events.write("row", row={})
    events.close()
    assert not path.exists()
