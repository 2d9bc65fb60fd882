"""``mha tiles``: one head's attention computed in tiles of keys, checked against the full computation."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from mhacli.cli import flow
from mhacli.cli.flow import finish_run, prepare_run, query_position
from mhacli.cli.options import FileOpt, NumbersJsonOpt, SampleOpt, TextArg, model_block, whole_option
from mhacli.cli.output import json_document, print_all, write_stdout
from mhacli.attention.errors import UsageError
from mhacli.request import ModelOptions  # the type of the model-option block, read by model_block at import

if TYPE_CHECKING:
    from mhacli.attention.tiles import Check, Tiled
    from mhacli.request import Request

BlockOpt = Annotated[int, typer.Option(
    "--block", "-B", metavar="N", parser=whole_option,
    help="Keys per block B: the scores held at once are N×B instead of N×N.")]
TilesQueryOpt = Annotated[Optional[str], typer.Option(
    "--query", "-q", show_default=False, metavar="TEXT",
    help="The query row whose running max, rescale and running sum are shown: a 0-based position or the "
    "token's text (default: the last token, which sees every block).")]
HeadOpt = Annotated[int, typer.Option("--head", metavar="N", parser=whole_option,
                                      help="Which head to compute (1 = the first).")]


@model_block("weights", "layer", "words", "heads", "d_model", "seed", "tokenizer", "positions", "causal", "dtype")
def tiles(
    text: TextArg = None,
    file: FileOpt = None,
    sample: SampleOpt = None,
    model: ModelOptions = None,  # type: ignore[assignment]  # the model-option block (options.MODEL_BLOCK)
    block: BlockOpt = 2,
    query: TilesQueryOpt = None,
    head: HeadOpt = 1,
    json_out: NumbersJsonOpt = False,
) -> None:
    """Compute one head's attention a block of keys at a time, as fast kernels do, and check it.

    The online softmax keeps each query row's running max and running sum, rescaling
    what came before when a block brings a larger score: the output is the full
    computation's, while only N×B scores are held. Without a text it uses the sample 'cat'.

    Example: [bold]mha tiles "the cat sat on the mat" --block 2 --query mat[/bold]
    """
    from mhacli.cli.commands.classroom import DEFAULT_SAMPLE

    _tiles(flow.request(model=model, text=text, file=file, sample=sample, query=query, json_out=json_out,
                        default_sample=DEFAULT_SAMPLE), block, head)


def _tiles(request: Request, block: int, head: int) -> None:
    """The request's run, head ``head`` computed in tiles of ``block`` keys: its table, or its JSON."""
    from mhacli.attention.tiles import attention_in_tiles
    from mhacli.attention.tokenize import label
    from mhacli.measures.verify import TOLERANCE

    trace = finish_run(prepare_run(request.text or "", request.model.given())).trace
    if not 1 <= head <= trace.num_heads:
        raise UsageError(f"--head must be from 1 to {trace.num_heads} (the run's heads), got {head}.")
    position = query_position(trace, request.outputs.query)
    at = trace.n_tokens - 1 if position is None else position  # the last token: its row sees every block
    if not 1 <= block <= trace.n_tokens:
        raise UsageError(f"--block must be from 1 to N = {trace.n_tokens} (the text's tokens), got {block}.")
    i = head - 1
    tiled = attention_in_tiles(trace.Q[i], trace.K[i], trace.V[i], block, trace.config.causal, at)
    check = tiled.check(trace.heads[i], TOLERANCE[trace.config.dtype])  # against the run's own full computation
    if request.outputs.json:
        write_stdout(json_document("tiles", tiles_document(tiled, head, trace.tokens[at], trace.config.causal,
                                                           check, trace.Q.itemsize)) + "\n")
        return
    from mhacli.render.tiles import tiles_view

    print_all(*tiles_view(tiled, label(trace.tokens[at], 16), head, trace.num_heads, trace.config.causal,
                          check, trace.Q.itemsize))


def tiles_document(tiled: Tiled, head: int, token: str, causal: bool, check: Check,
                   itemsize: int) -> dict[str, Any]:
    """``mha tiles --json``: the query row's record (−∞, a block the causal mask hides, as null) and the check."""
    def finite(x: float) -> float | None:
        return None if x == -math.inf else x

    return {"head": head, "query": tiled.query, "query_token": token, "block": tiled.block, "causal": causal,
            "tokens": tiled.output.shape[0],
            "steps": [{"block": s.block + 1, "first_key": s.first_key, "last_key": s.last_key,
                       "block_max": finite(s.block_max), "running_max": s.running_max, "rescale": s.rescale,
                       "running_sum": s.running_sum} for s in tiled.steps],
            "largest_difference": check.difference, "tolerance": check.tolerance, "same": check.same,
            "scores_held": tiled.held, "scores_full": tiled.full,
            "bytes_per_number": itemsize}


__all__ = ["tiles"]
