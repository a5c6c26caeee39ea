/*
 * ui.h -- the status page (GET /ui) and the JSON of what falls due ahead
 * (GET /due).
 *
 * The page is one self-contained HTML document (src/status/ui_page.html: its own
 * CSS and script, no CDN, no web font, works with no network), compiled into
 * the binary by src/status/ui_embed.cmake. Everything it shows it fetches from the
 * endpoint itself -- /stats, /due, /pending -- and every change it makes
 * (cancel a key, drain) goes through the same endpoints as curl would, each
 * after a confirmation, with the bearer token the person typed in when the
 * bridge has one (the page itself is served without a token: it holds no
 * data).
 *
 * Pure: no I/O.
 */
#ifndef DB_UI_H
#define DB_UI_H

#include <stddef.h>

#include "delay-bridge/duecount.h"

#define UI_CONTENT_TYPE "text/html; charset=utf-8"

/* The page: a static buffer of *len bytes. */
const char *ui_page(size_t *len);

struct json_object;
/*
 * Fill out (a JSON object) with the view: {"now_ms", "total", "later",
 * "minutes": {"start_ms", "step_ms", "counts": [60]}, "hours": {... [24]},
 * "days": {... [365]}, "cost": "..."}.
 */
void ui_due_json(const struct duecount_view *v, uint64_t now_ms, struct json_object *out);

#endif
