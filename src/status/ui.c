/*
 * ui.c -- the status page's bytes and the /due JSON (ui.h).
 *
 * The page lives in src/status/ui_page.html, a plain HTML file a person can open
 * and edit; the build turns it into ui_page.h (src/status/ui_embed.cmake).
 */
#include "delay-bridge/ui.h"

#include <json-c/json.h>

#include "ui_page.h"

const char *ui_page(size_t *len)
{
    *len = UI_PAGE_LEN;
    return (const char *)ui_page_bytes;
}

static struct json_object *series(uint64_t start, uint64_t step, const uint64_t *c, int n)
{
    struct json_object *o = json_object_new_object(), *a = json_object_new_array_ext(n);

    for (int i = 0; i < n; i++)
        json_object_array_add(a, json_object_new_uint64(c[i]));
    json_object_object_add(o, "start_ms", json_object_new_uint64(start));
    json_object_object_add(o, "step_ms", json_object_new_uint64(step));
    json_object_object_add(o, "counts", a);
    return o;
}

void ui_due_json(const struct duecount_view *v, uint64_t now_ms, struct json_object *out)
{
    json_object_object_add(out, "now_ms", json_object_new_uint64(now_ms));
    json_object_object_add(out, "total", json_object_new_uint64(v->total));
    json_object_object_add(out, "later", json_object_new_uint64(v->later));
    json_object_object_add(out, "minutes",
                           series(v->minute_start, 60000, v->minutes, DUECOUNT_MINUTES));
    json_object_object_add(out, "hours",
                           series(v->hour_start, 3600000, v->hours, DUECOUNT_HOURS));
    json_object_object_add(out, "days", series(v->day_start, 86400000, v->days, DUECOUNT_DAYS));
    json_object_object_add(out, "cost",
                           json_object_new_string("counters kept by the timing wheel on every "
                                                  "add, delete and firing: no WAL read, the "
                                                  "same few microseconds at any count held"));
}
