"""``module:factory`` backends over tests/peers_fake_server.py (BE-3, CON-11): the TFRA client store
talking to a stand-in server in this environment, one that works and one that dies on its first lookup."""
import sys
from pathlib import Path

from mxrec_ref.peers.tfra import TFRAStore

FAKE_SERVER = str(Path(__file__).resolve().parent / "peers_fake_server.py")


def open_fake_store(config, optimizer=None, **options):
    return TFRAStore(config, optimizer, command=[sys.executable, FAKE_SERVER], **options)


def open_dying_store(config, optimizer=None, **options):
    return TFRAStore(config, optimizer, command=[sys.executable, FAKE_SERVER, "--die-on", "lookup"], **options)


open_fake_store.known_differences = {"LKP-1": "the fake server is a dictionary"}
