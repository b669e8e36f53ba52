/*
 * The web page's files (tools/serve/webui/), built into recur serve's binary: the build writes a C
 * source with their bytes (cmake/embed_files.cmake), so the page needs no files beside the
 * binary and no network.
 */
#ifndef RECUR_TOOLS_WEBUI_ASSETS_H
#define RECUR_TOOLS_WEBUI_ASSETS_H

#include <stddef.h>

struct webui_asset {
    const char *name; /* the file's name in tools/serve/webui/: "index.html", "app.js" */
    const unsigned char *data;
    size_t size; /* bytes; data[size] is a 0 beyond them */
};

/* Every file, then a row whose name is NULL. */
extern const struct webui_asset webui_assets[];

#endif
