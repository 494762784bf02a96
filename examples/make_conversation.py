"""Writes examples/conversation.jsonl: a small agent conversation written for pgmem.

Six turns on different subjects. Turn 3 calls a tool whose result is a 400-row
logistics export with one detail buried in it (shipment SHP-20417 held at customs in
Rotterdam for a missing EORI number). In turn 5 the user mentions, in passing, that
their dogs are called Biscuit and Juniper. Run: python examples/make_conversation.py
"""

from __future__ import annotations

import json
import random
from pathlib import Path

OUT = Path(__file__).with_name("conversation.jsonl")


def export_rows() -> str:
    rng = random.Random(7)
    cities = ["Hamburg", "Antwerp", "Felixstowe", "Le Havre", "Gdansk", "Valencia", "Genoa"]
    statuses = ["delivered", "in transit", "loading", "delivered", "delivered", "in transit"]
    rows = ["shipment_id,origin,destination,status,eta,note"]
    for i in range(400):
        sid = f"SHP-{20018 + i}"
        if sid == "SHP-20417":
            rows.append(
                f"{sid},Shanghai,Rotterdam,held,2026-10-21,"
                "held at customs in Rotterdam: importer EORI number missing on the declaration"
            )
            continue
        rows.append(
            f"{sid},{rng.choice(['Ningbo', 'Busan', 'Singapore', 'Shanghai'])},"
            f"{rng.choice(cities)},{rng.choice(statuses)},2026-10-{rng.randint(10, 30)},ok"
        )
    return "\n".join(rows)


def turns() -> list[dict[str, object]]:
    thread = "ops-assistant"
    return [
        {
            "thread": thread,
            "turn": 1,
            "time": "2026-10-14T09:12:00Z",
            "messages": [
                {
                    "role": "user",
                    "content": "Can you draft the agenda for Thursday's platform review? "
                    "We need to cover the Postgres 18 upgrade, the on-call rota and the Q4 budget.",
                },
                {
                    "role": "assistant",
                    "content": "Here is a draft agenda: 1) Postgres 18 upgrade plan and "
                    "rollback window, 2) on-call rota changes for December, 3) Q4 infrastructure budget. "
                    "I put the upgrade first because it needs a decision on the maintenance window.",
                },
            ],
        },
        {
            "thread": thread,
            "turn": 2,
            "time": "2026-10-15T16:40:00Z",
            "messages": [
                {"role": "user", "content": "The staging deploy failed again. The error says DEPLOY_TOKEN is not set."},
                {
                    "role": "assistant",
                    "content": "The deploy script reads DEPLOY_TOKEN from .env.local, not from "
                    ".env. Add it to .env.local on the staging runner and rerun ./deploy.sh --env staging.",
                },
            ],
        },
        {
            "thread": thread,
            "turn": 3,
            "time": "2026-10-16T14:02:00Z",
            "messages": [
                {"role": "user", "content": "Pull the logistics export for October and tell me if anything is stuck."},
                {
                    "role": "assistant",
                    "content": "Fetching the October export.",
                    "tool_calls": [
                        {
                            "id": "call_export_1",
                            "type": "function",
                            "function": {
                                "name": "logistics_export",
                                "arguments": json.dumps({"month": "2026-10", "format": "csv"}),
                            },
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "call_export_1", "content": export_rows()},
                {"role": "assistant", "content": "400 shipments in October; most are delivered or in transit."},
            ],
        },
        {
            "thread": thread,
            "turn": 4,
            "time": "2026-10-17T11:05:00Z",
            "messages": [
                {"role": "user", "content": "What's a good way to speed up our nightly ETL? It takes four hours."},
                {
                    "role": "assistant",
                    "content": "Profile the slowest stage first. Usually it is row-by-row inserts: "
                    "switching them to COPY and building indexes after the load often cuts hours to minutes.",
                },
            ],
        },
        {
            "thread": thread,
            "turn": 5,
            "time": "2026-10-18T08:30:00Z",
            "messages": [
                {
                    "role": "user",
                    "content": "Remind me to book the vet on Monday: my dogs Biscuit and Juniper are due "
                    "for their boosters, and Juniper still limps a bit after the beach. "
                    "Also, move my 1:1 with Dana to Tuesday.",
                },
                {
                    "role": "assistant",
                    "content": "Noted: vet booking reminder for Monday, and your 1:1 with Dana moved to Tuesday.",
                },
            ],
        },
        {
            "thread": thread,
            "turn": 6,
            "time": "2026-10-20T13:15:00Z",
            "messages": [
                {"role": "user", "content": "For the Q4 budget: we agreed to cap cloud spend at 48k per month."},
                {"role": "assistant", "content": "Recorded: Q4 cloud spend cap of 48k per month."},
            ],
        },
    ]


def main() -> None:
    with OUT.open("w", encoding="utf-8") as f:
        for t in turns():
            f.write(json.dumps({"scope": "demo", **t}, ensure_ascii=False) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
