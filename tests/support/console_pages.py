"""Screenshots of the console's main pages for docs/console.md: ``python -m tests.support.console_pages``.

A SQLite store gets a few requests a worker leaves failed, waiting and completed, and a dead
letter; the console serves them and headless Chromium photographs the list, a request's
timeline, the abort confirmation and the dead letters into docs/images/console-*.png.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from selenium.webdriver.common.by import By

from idemflow.client import submit
from idemflow.console._settings import ConsoleSettings
from idemflow.stores import SqliteStore
from idemflow.worker import SqliteQueue, Worker
from tests.support.console_app import WORKFLOWS, booking, shipment
from tests.support.console_browser import chromium
from tests.support.console_http import running

IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"


def main(out: Path = IMAGES) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        store = SqliteStore(f"{folder}/shop.db")
        queue = SqliteQueue(f"{folder}/queue.db")
        store.create_tables("items")
        for n in range(3):
            submit(shipment(f"o{n}"), request_id=f"order-10{n}", store=store, queue=queue)
        for show in ("gala", "matinee"):
            card = {"number": "4242", "cvc_token": "tok_" + show}
            submit(booking(show, card), request_id=f"booking-{show}", store=store, queue=queue)
        queue.send('{"kind": "continuation", "signature": "forged"}')
        Worker(WORKFLOWS, store=store, queue=queue, wait=0.05, relay_every=None).run(idle_timeout=1.0)
        [stray] = queue.receive() or [None]
        if stray is not None:
            queue.dead_letter(stray, "rejected: bad signature")
        settings = ConsoleSettings(port=0, store_url="sqlite:shop.db", queue_url="sqlite:queue.db")
        driver = chromium(1200, 760)
        shots = {
            "console-list.png": "/",
            "console-request.png": "/runs/booking-gala?workflow=booking",
            "console-failed.png": "/runs/order-101?workflow=shipment",
            "console-abort.png": "/runs/booking-gala/abort?workflow=booking",
            "console-dead-letters.png": "/dead-letters",
        }
        written = []
        try:
            with running(settings, store, queue) as console:
                for name, path in shots.items():
                    driver.get(console.url + path)
                    driver.find_element(By.TAG_NAME, "main")
                    driver.save_screenshot(str(out / name))
                    written.append(out / name)
        finally:
            driver.quit()
            queue.close()
            store.close()
    return written


if __name__ == "__main__":
    for path in main(Path(sys.argv[1]) if len(sys.argv) > 1 else IMAGES):
        print(path)
