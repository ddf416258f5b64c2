// SPDX-License-Identifier: Apache-2.0
// job_folder_racer UID GID DIR NAME TARGET: becomes UID/GID (the job's owner), makes DIR when it
// is missing and then, until killed, keeps replacing DIR/NAME with a symbolic link to TARGET
// (symlink + rename, so the name is never missing), as an owner racing fp8d for a name it
// uses would.
#include <grp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: %s UID GID DIR NAME TARGET\n", argv[0]);
    return 2;
  }
  const uid_t uid = static_cast<uid_t>(std::atol(argv[1]));
  const gid_t gid = static_cast<gid_t>(std::atol(argv[2]));
  if (setgroups(0, nullptr) != 0 || setgid(gid) != 0 || setuid(uid) != 0) {
    std::perror("dropping to the owner");
    return 1;
  }
  const std::string dir = argv[3];
  const std::string name = dir + "/" + argv[4];
  const std::string tmp = dir + "/.racer-link";
  if (mkdir(dir.c_str(), 0755) != 0 && access(dir.c_str(), W_OK) != 0) {
    std::perror(dir.c_str());
    return 1;
  }
  for (;;) {
    unlink(tmp.c_str());
    if (symlink(argv[5], tmp.c_str()) == 0) rename(tmp.c_str(), name.c_str());
  }
}
