"""Screenshot of a run's ``report.html`` (the docs' picture of the explorer).

    python scripts/explorer_screenshot.py RUN_DIR docs/explorer.png

Regenerates the page (``mnemis report``'s code), opens it in headless Chromium, opens the first question
with a System-2 walk and the first level of its tree, and saves a PNG of the page's top.
"""

from __future__ import annotations

import sys
from pathlib import Path

from mnemis.eval.explorer import snapshot_from_build
from mnemis.testing.headless import chromium
from mnemis.eval.report import write_report


def main(run_dir: str, out: str) -> None:
    run = Path(run_dir)
    snapshot_from_build(run)
    write_report(run)
    browser = chromium(1280, 2100)
    try:
        browser.get((run / "report.html").resolve().as_uri())
        for row in browser.find_elements("css selector", "tr.q"):
            row.click()
            detail = row.find_element("xpath", "following-sibling::tr[1]")
            nodes = detail.find_elements("css selector", ".tree details.node > summary")
            if nodes:
                nodes[0].click()
                break
            row.click()  # no walk recorded for this one: close it again
        errors = [e for e in browser.get_log("browser") if e.get("level") == "SEVERE"]
        if errors:
            raise SystemExit(f"console errors on the page: {errors}")
        browser.execute_script("window.scrollTo(0, 0)")
        browser.save_screenshot(out)
    finally:
        browser.quit()
    print(f"wrote {out}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    main(sys.argv[1], sys.argv[2])
