// shardctl watch JOB (and submit --watch): live progress until the job ends.
#include <unistd.h>

#include <algorithm>
#include <iostream>

#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/json_output.h"
#include "cli/progress_view.h"

namespace shardline::cli {
namespace {

using client::CoordinatorClient;

// watch --json: the job's status as one JSON line per update, until it ends.
int WatchJson(Session& session, client::CoordinatorClient& client, const std::string& job_id) {
  JobState last = JOB_STATE_UNSPECIFIED;
  const absl::Status s = client.WatchJob(job_id, [&](const JobStatus& st) {
    std::cout << ToJsonLine(st) << "\n" << std::flush;
    last = st.state();
    return true;
  });
  if (!s.ok()) return session.Fail(s);
  return last == SUCCEEDED ? kOk : kJobFailed;
}

}  // namespace

int WatchJob(Session& session, client::CoordinatorClient& client, const std::string& job_id) {
  if (session.options().json) return WatchJson(session, client, job_id);
  const bool tty = isatty(STDOUT_FILENO);
  JobStatus last;
  std::string last_line;
  int64_t events_shown = 0;  // Counting the ones the coordinator dropped (events_dropped).
  const absl::Status s = client.WatchJob(job_id, [&](const JobStatus& st) {
    for (events_shown = std::max(events_shown, st.events_dropped());
         events_shown < st.events_dropped() + st.events_size(); ++events_shown) {
      const JobEvent& e = st.events(static_cast<int>(events_shown - st.events_dropped()));
      if (tty && !last_line.empty()) std::cout << "\n";
      std::cout << "[" << e.kind() << "] " << e.message() << "\n";
      // A terminal's progress line was pushed up by the event: draw it again below. In a log
      // the line above is still the latest; printing it again only repeats it.
      if (tty) last_line.clear();
    }
    const std::string line = ProgressLine(st);
    if (line != last_line) {
      if (tty) {
        std::cout << "\r\033[K" << line << std::flush;
      } else {
        std::cout << line << "\n" << std::flush;
      }
      last_line = line;
    }
    last = st;
    return true;
  });
  if (tty) std::cout << "\n";
  if (!s.ok()) return session.Fail(s);
  if (!last.sample().empty()) std::cout << "sample:\n" << last.sample() << "\n";
  if (last.state() == SUCCEEDED) return kOk;
  std::cerr << "shardctl: job " << job_id << " " << JobStateName(last.state())
            << (last.message().empty() ? "" : ": " + last.message()) << "\n";
  return kJobFailed;
}

int CmdWatch(Session& session, const Args& args) {
  if (args.size() < 3) return session.UsageError("usage: shardctl watch JOB");
  auto client = session.Connect();
  if (!client.ok()) return session.Fail(client.status());
  return WatchJob(session, **client, args[2]);
}

}  // namespace shardline::cli
