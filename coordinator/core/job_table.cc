#include "coordinator/core/job_table.h"

#include <algorithm>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "coordinator/core/job_state_machine.h"

namespace shardline::coordinator {

namespace {
constexpr char kBase36[] = "0123456789abcdefghijklmnopqrstuvwxyz";
}  // namespace

std::string NewJobId(absl::Time now) {
  std::string time;
  for (uint64_t ms = static_cast<uint64_t>(std::max<int64_t>(0, absl::ToUnixMillis(now)));
       ms > 0 || time.empty(); ms /= 36) {
    time.insert(time.begin(), kBase36[ms % 36]);
  }
  std::random_device rd;  // /dev/urandom on Linux
  std::string suffix;
  for (int i = 0; i < 4; ++i) suffix.push_back(kBase36[rd() % 36]);
  return absl::StrCat("job-", time, suffix);
}

absl::StatusOr<JobRecord> JobTable::NewJob(const JobSpec& spec, absl::Time now) {
  std::string id = NewJobId(now);
  while (jobs_.count(id) > 0 || new_ids_.count(id) > 0) id = NewJobId(now);
  JobRecord job;
  job.set_seq(next_seq_);
  JobStatus& st = *job.mutable_status();
  st.set_job_id(id);
  *st.mutable_spec() = spec;
  st.set_world_size(spec.world_size());
  st.set_total_steps(spec.train().steps());
  if (absl::Status s = JobStateMachine(&job, now).Submit(); !s.ok()) return s;
  next_seq_++;
  new_ids_.insert(id);
  return job;
}

JobRecord* JobTable::Add(JobRecord job) {
  const std::string id = job.status().job_id();
  new_ids_.erase(id);
  JobRecord& added = jobs_[id] = std::move(job);
  feed_->JobChanged(id);
  return &added;
}

absl::StatusOr<JobRecord*> JobTable::Submit(const JobSpec& spec, absl::Time now) {
  absl::StatusOr<JobRecord> job = NewJob(spec, now);
  if (!job.ok()) return job.status();
  if (absl::Status s = writer_->PutJobOrDrop(*job); !s.ok()) return s;
  return Add(*std::move(job));
}

JobRecord& JobTable::Restore(const JobRecord& rec) {
  JobRecord& job = jobs_[rec.status().job_id()] = rec;
  TrimEvents(job);  // Stored before the bound was lowered: trimmed here, stored at its next change.
  feed_->AddJob(rec.status().job_id());
  next_seq_ = std::max(next_seq_, rec.seq() + 1);
  return job;
}

absl::StatusOr<JobRecord*> JobTable::Find(const std::string& job_id) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("unknown job ", job_id));
  return &it->second;
}

absl::StatusOr<const JobRecord*> JobTable::Find(const std::string& job_id) const {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("unknown job ", job_id));
  return &it->second;
}

void JobTable::TrimEvents(JobRecord& job) const {
  JobStatus& st = *job.mutable_status();
  const int excess = st.events_size() - max_events_;
  if (excess <= 0) return;
  st.mutable_events()->DeleteSubrange(0, excess);
  st.set_events_dropped(st.events_dropped() + excess);
}

StateWriter::Ticket JobTable::Changed(JobRecord& job) {
  TrimEvents(job);
  feed_->JobChanged(job.status().job_id());
  deferred_.erase(job.status().job_id());  // This write carries the progress too.
  if (before_end_write_ && IsTerminal(job.status().state())) {
    before_end_write_(job.status().job_id());
  }
  return writer_->PutJob(job);
}

void JobTable::ProgressChanged(JobRecord& job, absl::Time now) {
  feed_->JobChanged(job.status().job_id());
  deferred_.emplace(job.status().job_id(), now);  // Keeps the first change's time.
}

void JobTable::FlushDeferred(absl::Time now, absl::Duration interval, bool all) {
  for (auto it = deferred_.begin(); it != deferred_.end();) {
    if (!all && now - it->second < interval) {
      ++it;
      continue;
    }
    if (auto job = jobs_.find(it->first); job != jobs_.end()) writer_->PutJob(job->second);
    it = deferred_.erase(it);
  }
}

std::vector<JobStatus> JobTable::ListPage(const std::vector<JobState>& states, int64_t after_seq,
                                          int limit, int64_t* last_seq, bool* more,
                                          bool newest_first) const {
  std::vector<const JobRecord*> sel;
  for (const auto& [id, job] : jobs_) {
    const bool in_range =
        newest_first ? (after_seq == 0 || job.seq() < after_seq) : job.seq() > after_seq;
    if (in_range && (states.empty() || std::find(states.begin(), states.end(),
                                                 job.status().state()) != states.end())) {
      sel.push_back(&job);
    }
  }
  std::sort(sel.begin(), sel.end(), [newest_first](const JobRecord* a, const JobRecord* b) {
    return newest_first ? a->seq() > b->seq() : a->seq() < b->seq();
  });
  *more = sel.size() > static_cast<size_t>(limit);
  if (*more) sel.resize(limit);
  *last_seq = sel.empty() ? after_seq : sel.back()->seq();
  std::vector<JobStatus> out;
  for (const JobRecord* j : sel) out.push_back(j->status());
  return out;
}

std::vector<JobStatus> JobTable::List(const std::vector<JobState>& states) const {
  std::vector<const JobRecord*> sel;
  for (const auto& [id, job] : jobs_) {
    if (states.empty() ||
        std::find(states.begin(), states.end(), job.status().state()) != states.end()) {
      sel.push_back(&job);
    }
  }
  std::sort(sel.begin(), sel.end(),
            [](const JobRecord* a, const JobRecord* b) { return a->seq() < b->seq(); });
  std::vector<JobStatus> out;
  for (const JobRecord* j : sel) out.push_back(j->status());
  return out;
}

std::vector<std::string> JobTable::FinishedSince(int64_t since_unix_ms) const {
  std::vector<std::string> ids;
  for (const auto& [id, job] : jobs_) {
    if (IsTerminal(job.status().state()) && job.status().finished_unix_ms() >= since_unix_ms) {
      ids.push_back(id);
    }
  }
  return ids;
}

std::vector<std::string> JobTable::CollectFinished(absl::Time now, absl::Duration ttl,
                                                   int max_finished) {
  std::vector<const JobRecord*> finished;
  for (const auto& [id, job] : jobs_) {
    if (IsTerminal(job.status().state())) finished.push_back(&job);
  }
  std::sort(finished.begin(), finished.end(), [](const JobRecord* a, const JobRecord* b) {
    return std::make_pair(a->status().finished_unix_ms(), a->seq()) <
           std::make_pair(b->status().finished_unix_ms(), b->seq());
  });
  const int64_t cutoff_ms = absl::ToUnixMillis(now - ttl);
  size_t n = 0;  // finished[0, n) are collected
  if (ttl > absl::ZeroDuration()) {
    while (n < finished.size() && finished[n]->status().finished_unix_ms() < cutoff_ms) ++n;
  }
  if (max_finished > 0 && finished.size() - n > static_cast<size_t>(max_finished)) {
    n = finished.size() - max_finished;
  }
  std::vector<std::string> ids;
  for (size_t i = 0; i < n; ++i) ids.push_back(finished[i]->status().job_id());
  for (const std::string& id : ids) {
    jobs_.erase(id);
    deferred_.erase(id);  // A late write would bring the removed record back.
  }
  return ids;
}

std::map<JobState, int> JobTable::CountByState() const {
  std::map<JobState, int> out;
  for (const auto& [id, job] : jobs_) out[job.status().state()]++;
  return out;
}

absl::StatusOr<ListJobsResponse> JobTable::Page(const ListJobsRequest& req, int max_page_size,
                                                bool newest_first) const {
  if (req.page_size() < 0 || req.page_size() > max_page_size) {
    return absl::InvalidArgumentError(absl::StrCat("page_size ", req.page_size(), " is not in [0, ",
                                                   max_page_size, "] (--max_list_page_size)"));
  }
  const int limit = req.page_size() == 0 ? std::min(100, max_page_size) : req.page_size();
  int64_t after = 0;
  if (!req.page_token().empty() && (!absl::SimpleAtoi(req.page_token(), &after) || after < 0)) {
    return absl::InvalidArgumentError(absl::StrCat("page_token \"", req.page_token().substr(0, 64),
                                                   "\" was not issued by this coordinator"));
  }
  std::vector<JobState> states;
  for (int st : req.states()) states.push_back(static_cast<JobState>(st));
  ListJobsResponse resp;
  int64_t last = 0;
  bool more = false;
  for (JobStatus& job : ListPage(states, after, limit, &last, &more, newest_first)) {
    *resp.add_jobs() = std::move(job);
  }
  if (more) resp.set_next_page_token(absl::StrCat(last));
  return resp;
}

}  // namespace shardline::coordinator
