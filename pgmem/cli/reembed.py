"""`pgmem reembed --to MODEL (--scope S | --all)`: a model change without downtime."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from pgmem.cli.common import embedder_for, open_conn, settings, shown
from pgmem.config import Settings
from pgmem.errors import ConfigError, InputError, NotFoundError
from pgmem.text import check_name

#: What --to accepts: the local models by name, or an OpenAI-compatible model.
MODELS = ("local", "e5", "openai", "openai:<model>")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "reembed",
        help="change the embedding model of scopes without downtime (resumable)",
        description="Embed every piece of the scope (or of every scope) with the new model beside the "
        "serving vectors, then swap them in, one transaction per scope. Recall serves the old model "
        "until the swap. Run again to resume an interrupted run.",
    )
    p.add_argument("--to", required=True, metavar="MODEL", help="local, e5, openai or openai:<model>")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--scope", help="the scope to move to the new model")
    which.add_argument("--all", action="store_true", help="every scope (as a member of pgmem_owner or a superuser)")
    p.add_argument("--no-flip", action="store_true", help="stage the new vectors only; a later run swaps them in")
    p.add_argument("--json", action="store_true", help="one JSON object per scope on stdout")
    p.set_defaults(func=_reembed)


def _target(to: str) -> Settings:
    s = settings()
    name, sep, model = to.strip().partition(":")
    name = name.lower()
    if name not in ("local", "e5", "openai") or (sep and (name != "openai" or not model)):
        raise ConfigError(f"--to must be one of {', '.join(MODELS)}, got {to!r:.60}")
    if name == "openai":
        return dataclasses.replace(s, embedder="openai", openai_model=model or s.openai_model)
    return dataclasses.replace(s, embedder=name)


class _Progress:
    """One line on stderr: scope, staged/total, rate and ETA."""

    def __init__(self, scope: str) -> None:
        self.scope = scope
        self.last = -1.0
        self.first: tuple[int, float] | None = None

    def __call__(self, done: int, total: int, seconds: float) -> None:
        if self.first is None:
            self.first = (done, seconds)
        if seconds - self.last < 1.0 and done < total:
            return
        self.last = seconds
        new = done - self.first[0]
        rate = new / max(seconds - self.first[1], 1e-9)
        eta = (total - done) / rate if rate > 0 else 0.0
        print(
            f"reembed {shown(self.scope)}: {done}/{total} pieces · {rate:.0f}/s · ETA {eta:.0f}s",
            file=sys.stderr,
            flush=True,
        )


def _reembed(args: argparse.Namespace) -> int:
    from pgmem.reembed import maintenance_scopes, reembed

    target = _target(args.to)
    if args.scope is not None:
        check_name(args.scope, "--scope")
    with open_conn() as conn:
        # Checks the model against the installed schema before anything is embedded.
        emb = embedder_for(conn, "piece", target)
        scopes = [args.scope] if args.scope is not None else maintenance_scopes(conn)
        if not scopes:
            print(
                "pgmem: error: no scope is visible to this login: --all needs a login member of pgmem_owner "
                "or a superuser (the application login sees one scope: use --scope)",
                file=sys.stderr,
            )
            return 2
        failed = 0
        for scope in scopes:
            try:
                res = reembed(conn, scope, emb, flip=not args.no_flip, progress=_Progress(scope))
            except (InputError, NotFoundError) as exc:
                if args.scope is not None:
                    raise
                # --all lists every scope, also those without a piece (only facts, or only a
                # retention setting), which reembed refuses by name: the others still move. So
                # does a scope forgotten while it was moved (its flip finds no scope: 42704),
                # which stopped the run there, the scopes after it on the old model.
                print(f"scope {scope!r}: skipped: {shown(str(exc))}", file=sys.stderr)
                continue
            # Model names are stored text (the registry): shown, as every stored text printed.
            model, previous = shown(res.model_id), shown(str(res.previous_model))
            if args.json:
                print(json.dumps(res.as_dict()))
            elif res.flipped:
                print(
                    f"scope {scope!r}: {res.pieces} pieces on {model} (was {previous}); "
                    f"embedded {res.embedded}{' (resumed)' if res.resumed else ''}, {res.turns} turns, "
                    f"{res.seconds:.1f}s"
                )
            else:
                print(
                    f"scope {scope!r}: {res.embedded} pieces staged for {model}; still serving "
                    f"{previous}" + ("" if args.no_flip else " (writers kept adding pieces: run again)")
                )
                failed += 0 if args.no_flip else 1
            if res.truncated and not args.json:
                print(
                    f"scope {scope!r}: {res.truncated} pieces are longer than {model}'s input window "
                    f"({emb.max_input_tokens} tokens) and were embedded cut: `pgmem rebuild --scope` packs "
                    "the turns again for it (documents: `pgmem docs add --force`)",
                    file=sys.stderr,
                )
    return 1 if failed else 0
