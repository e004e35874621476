"""What both kinds of positions (§3.5's sinusoids, Table 3 (E)'s learned embeddings) give the embeddings: the vectors
of a run of positions, of each token of a padded row, or of the positions a packed batch names, each after an explicit
check that the positions fit the table.

Travels with the model (relative import of modeling_annotated_transformer.py).
"""

import torch


def check_positions_fit(table: torch.Tensor, last_position: int | torch.Tensor) -> None:
    """Refuses a position beyond the table's `max_position_embeddings` rows, naming both. Not while compiling: the
    comparison, a device sync for a tensor position, would break the graph (a static cache's length is a tensor)."""
    if not torch.compiler.is_compiling() and last_position >= table.shape[0]:
        raise ValueError(
            f"Sequence position {int(last_position)} is beyond `max_position_embeddings` ({table.shape[0]}): "
            "truncate the input or build the model with a larger `max_position_embeddings`."
        )


class PositionLookups:
    """Mixed into each kind of positions; `table` is its (max_position_embeddings, d_model) matrix."""

    table: torch.Tensor

    def forward(self, start: int | torch.Tensor, length: int) -> torch.Tensor:
        """The vectors of positions start, ..., start + length - 1: a slice of the table (no gather, no device sync),
        or a gather when `start` is a tensor (a static cache's length), so that a compiled decoding step neither syncs
        nor breaks its graph."""
        check_positions_fit(self.table, start + length - 1)
        if isinstance(start, torch.Tensor):
            return self.table.index_select(0, start + torch.arange(length, device=start.device))
        return self.table[start : start + length]

    def of_tokens(self, attention_mask: torch.Tensor) -> torch.Tensor:
        """(batch, length, d_model): each token's position counts the tokens before it in its row, so that a
        left-padded sentence is encoded as it is alone (padding positions, masked everywhere, repeat a neighbour's)."""
        check_positions_fit(self.table, attention_mask.shape[1] - 1)
        return self.table[(attention_mask.ne(0).long().cumsum(-1) - 1).clamp(min=0)]

    def at(self, position_ids: torch.Tensor) -> torch.Tensor:
        """(batch, length, d_model): the vectors of the positions given, a packed batch's, which restart at 0 with
        each pair and so stay below the row's length."""
        check_positions_fit(self.table, position_ids.shape[1] - 1)
        return self.table[position_ids]
