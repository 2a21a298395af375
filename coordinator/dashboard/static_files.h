// The dashboard's pages, script and style (coordinator/dashboard/static/), compiled into the
// binary by embed.sh, so a deployed coordinator needs no files of its own besides chart.js
// (Debian's libjs-chart.js, read from /usr/share/javascript/chart.js/).
#ifndef SHARDLINE_COORDINATOR_DASHBOARD_STATIC_FILES_H_
#define SHARDLINE_COORDINATOR_DASHBOARD_STATIC_FILES_H_

#include "absl/strings/string_view.h"

namespace shardline::coordinator::dashboard {

struct StaticFile {
  const char* name;     // base name: "job.html"
  const char* content;  // the file's text
};

// Defined in the generated static_files.cc.
extern const StaticFile kStaticFiles[];
extern const int kStaticFileCount;

// The file named `name`; nullptr when there is none.
inline const StaticFile* FindStaticFile(absl::string_view name) {
  for (int i = 0; i < kStaticFileCount; ++i) {
    if (name == kStaticFiles[i].name) return &kStaticFiles[i];
  }
  return nullptr;
}

// The Content-Type of a static file by its extension (.html, .js, .css; else text/plain).
inline const char* ContentTypeOf(absl::string_view name) {
  if (name.size() >= 5 && name.substr(name.size() - 5) == ".html")
    return "text/html; charset=utf-8";
  if (name.size() >= 3 && name.substr(name.size() - 3) == ".js") {
    return "text/javascript; charset=utf-8";
  }
  if (name.size() >= 4 && name.substr(name.size() - 4) == ".css") return "text/css; charset=utf-8";
  return "text/plain; charset=utf-8";
}

}  // namespace shardline::coordinator::dashboard

#endif  // SHARDLINE_COORDINATOR_DASHBOARD_STATIC_FILES_H_
