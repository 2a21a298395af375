// libtorch_cpu.so (from the torch wheel) exports its own copy of Gloo's symbols. Our Gloo
// calls must bind to Debian's libgloo.so, whose headers we compile against; binding to
// torch's copy would mix two versions of Gloo's classes. @libtorch//:torch puts -lgloo first
// on the link line to get that; this test checks the result at run time with dladdr().
#include <dlfcn.h>

#include <string>

#include "fsdp/gloo_communicator.h"
#include "gloo/allgather.h"
#include "gloo/allreduce.h"
#include "gloo/rendezvous/context.h"
#include "gloo/transport/tcp/device.h"
#include "gtest/gtest.h"

namespace {

std::string LibraryOf(const void* address) {
  Dl_info info{};
  if (dladdr(address, &info) == 0 || info.dli_fname == nullptr) return "<unknown>";
  return info.dli_fname;
}

void ExpectDebianGloo(const void* address, const char* what) {
  const std::string lib = LibraryOf(address);
  EXPECT_NE(lib.find("libgloo.so"), std::string::npos) << what << " resolved into " << lib;
  EXPECT_EQ(lib.find("libtorch"), std::string::npos) << what << " resolved into " << lib;
}

TEST(GlooBinding, FunctionsResolveIntoDebianLibgloo) {
  // Taking the address through the PLT/GOT yields the definition the dynamic linker chose.
  ExpectDebianGloo(reinterpret_cast<const void*>(&gloo::allgather), "gloo::allgather");
  ExpectDebianGloo(reinterpret_cast<const void*>(&gloo::allreduce), "gloo::allreduce");
  ExpectDebianGloo(reinterpret_cast<const void*>(&gloo::transport::tcp::CreateDevice),
                   "gloo::transport::tcp::CreateDevice");
  void (gloo::rendezvous::Context::*connect)(gloo::rendezvous::Store&,
                                             std::shared_ptr<gloo::transport::Device>&) =
      &gloo::rendezvous::Context::connectFullMesh;
  const void* connect_address;
  static_assert(sizeof(connect) >= sizeof(void*), "member pointer holds the address first");
  memcpy(&connect_address, &connect, sizeof(void*));
  ExpectDebianGloo(connect_address, "gloo::rendezvous::Context::connectFullMesh");
}

TEST(GlooBinding, DeviceVtableComesFromDebianLibgloo) {
  // An object made by CreateDevice: its vtable shows whose code built it.
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
  const void* vtable = *reinterpret_cast<void* const*>(device.get());
  ExpectDebianGloo(vtable, "vtable of gloo::transport::tcp::Device");
}

TEST(GlooBinding, TheWheelReallyExportsGlooToo) {
  // Guards the premise: if torch stopped exporting Gloo, the test above would prove nothing
  // about link order (and the linkopts comment could go).
  void* torch = dlopen("libtorch_cpu.so", RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(torch, nullptr) << "libtorch_cpu.so is not loaded in this process";
  void* sym = dlsym(torch, "_ZN4gloo9allgatherERNS_16AllgatherOptionsE");
  EXPECT_NE(sym, nullptr);
  // dlsym on the torch handle searches torch's own dependency scope, so its hit is in torch.
  if (sym != nullptr) {
    EXPECT_NE(LibraryOf(sym).find("libtorch_cpu"), std::string::npos) << LibraryOf(sym);
  }
  dlclose(torch);
}

}  // namespace
