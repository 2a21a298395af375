// Prints a TCP port on 127.0.0.1 that was free a moment ago (bound with port 0, then closed),
// for shell tests that must hand MASTER_PORT to several trainer processes. Test-only.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>

int main() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    std::perror("free_port");
    return 1;
  }
  std::printf("%d\n", ntohs(addr.sin_port));
  close(fd);
  return 0;
}
