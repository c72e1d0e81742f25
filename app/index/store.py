"""A store the index knows, with its reader open (what ``lastgood.stores.open_store`` returns and
every later step takes)."""

from __future__ import annotations

from dataclasses import dataclass

from lastgood.readers.base import Reader
from lastgood.readers.common.urls import display_url


@dataclass
class OpenStore:
    """A store the index knows, with its reader open."""

    url: str
    store_id: int
    reader: Reader

    @property
    def display_url(self) -> str:
        return display_url(self.url)
