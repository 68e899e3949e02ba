"""Per-piece timings of the audit's task code on columns, at a whole-fleet policy's sizes.

Each piece runs on generated inputs in this process (no Spark) and reports the best of `--runs`:
- `skips_table`: a policy's 100,000 deferred groups (`GroupSkips`, shuffled ids) as `skips` rows;
- `uuid_strings`: 600,000 offsets' topic ids (7 distinct, 10% absent) formatted as strings;
- `decode_plain_values`: 300,000 OffsetCommit values (v3 and v4 with a TopicId);
- `decode_commit_keys`: 300,000 OffsetCommit keys without their type.

    PYTHONPATH=operator:tests:. .venv/bin/python -m bench.bench_stage_pieces [--runs 9]

Run it with another tree's `operator/` on PYTHONPATH to compare two versions of the code.
"""

from __future__ import annotations

import argparse
import json
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from groupwarden.core.parts import PartDecision
from groupwarden.core.plan import SkipReason
from groupwarden.core.policy import ConsumerGroupPolicy
from groupwarden.core.snapshot import GroupKind
from groupwarden.fleet.columnar_decide import GroupSkips
from groupwarden.fleet.fast_codec import decode_commit_keys, decode_plain_values, uuid_strings
from groupwarden.fleet.task_decide import skips_table
from groupwarden.offsets_log.records import OffsetCommitKey, OffsetCommitValue
from groupwarden.testing.offsets_log_encoder import encode_key, encode_value


@dataclass
class _Settings:
    policies: list[ConsumerGroupPolicy]


def best_ms(run: Callable[[], Any], runs: int) -> float:
    best = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    return round(best * 1000, 1)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()

    policy = ConsumerGroupPolicy.model_validate(
        {
            "apiVersion": "groupwarden.io/v1beta1",
            "kind": "ConsumerGroupPolicy",
            "metadata": {"name": "fleet", "namespace": "bench"},
            "spec": {
                "kafka": {"bootstrapServers": "127.0.0.1:9"},
                "selector": {"include": ["*"]},
                "rules": {"emptyGroupRetention": "7d"},
            },
        }
    )
    ids = [f"fleet-{i:06d}" for i in range(100_000)]
    random.Random(1).shuffle(ids)
    blocks = [[GroupSkips(ids, [GroupKind.SIMPLE] * len(ids), SkipReason.LIMIT_REACHED, "limit reached")]]
    decision = PartDecision([[]], [[]])
    settings: Any = _Settings([policy])

    rng = np.random.default_rng(1)
    topic_ids = rng.integers(0, 256, (7, 16), dtype=np.uint8)[rng.integers(0, 7, 600_000)]
    present = rng.random(600_000) < 0.9

    values = pa.array(
        [
            encode_value(
                OffsetCommitValue(
                    i,
                    -1,
                    "",
                    1_700_000_000_000 + i,
                    -1,
                    uuid.UUID(int=i % 7 + 1) if i % 2 else None,
                    3 + i % 2,
                )
            )
            for i in range(300_000)
        ],
        pa.binary(),
    )
    keys = pa.array(
        [
            encode_key(OffsetCommitKey(f"fleet-{i // 6:06d}", f"topic-{i % 7}", i % 6))[2:]
            for i in range(300_000)
        ],
        pa.binary(),
    )
    result = {
        "skips_table_100k_ms": best_ms(lambda: skips_table("c", "C", settings, decision, blocks), args.runs),
        "uuid_strings_600k_ms": best_ms(lambda: uuid_strings(topic_ids, present), args.runs),
        "decode_plain_values_300k_ms": best_ms(lambda: decode_plain_values(values), args.runs),
        "decode_commit_keys_300k_ms": best_ms(lambda: decode_commit_keys(keys), args.runs),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
