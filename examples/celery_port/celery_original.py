# The Celery app this example ports (kept for comparison; errands does not run it).
# A report pipeline: fetch each region's sales, sum them in a chord, then format and mail the
# total in a chain. Fetching retries only on ConnectionError, with Celery's exponential backoff.
from celery import Celery, chain, chord

app = Celery("reports", broker="redis://localhost", backend="redis://localhost")

SALES = {"north": [120, 80], "south": [200], "east": [50, 50, 25], "west": []}


@app.task(autoretry_for=(ConnectionError,), retry_backoff=True, max_retries=4)
def fetch_sales(region):
    return sum(SALES[region])


@app.task
def total(amounts):
    return sum(amounts)


@app.task
def format_report(amount, currency):
    return f"Total sales: {amount} {currency}"


@app.task
def mail_report(text, to):
    print(f"to {to}: {text}")
    return len(text)


@app.task
def report_failed(request, exc, traceback):
    print(f"report failed: {exc!r}")


def monthly_report(regions, to):
    return chain(
        chord([fetch_sales.s(r) for r in regions], total.s()),
        format_report.s("EUR"),
        mail_report.s(to),
    ).apply_async(link_error=report_failed.s())
