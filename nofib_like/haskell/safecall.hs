{-# LANGUAGE BangPatterns #-}
-- safecall: the cost of a `foreign import ccall safe` call over an `unsafe`
-- one, to the same trivial C function (nofib_like/ffi_nop.c).
--   safecall <n> 1  one thread: n unsafe calls, then n safe calls.
--                   added_ns = safe_ns - plain_ns, each elapsed / n.
--   safecall <n> T  (T >= 2) one thread makes n safe calls, then T threads
--                   (forkOn 0..T-1) make n each at the same time.
--                   scaling = (T*n / elapsed_T) / (n / elapsed_1), higher is better.
-- Check: the sum of the results equals the same sum computed without calls.
-- Haskell twin of nofib_like/safecall.cpp.
module Main (main) where

import Control.Concurrent
import Control.Monad (forM, when)
import Data.Bits ((.&.))
import Data.Word (Word64)
import Foreign.C.Types (CInt (..))
import GHC.Clock (getMonotonicTimeNSec)
import System.Environment (getArgs)
import System.Exit
import Text.Printf (printf)

foreign import ccall unsafe "capstan_bench_nop" nopUnsafe :: CInt -> IO CInt
foreign import ccall safe "capstan_bench_nop" nopSafe :: CInt -> IO CInt

arg :: Int -> CInt
arg i = fromIntegral (i .&. 1023)

expectedSum :: Int -> Int
expectedSum n = sum [fromIntegral (arg i) + 1 | i <- [0 .. n - 1]]

calls :: (CInt -> IO CInt) -> Int -> IO Int
calls f n = go 0 0
  where
    go !i !acc
      | i >= n    = return acc
      | otherwise = do r <- f (arg i)
                       go (i + 1) (acc + fromIntegral r)

elapsed :: Word64 -> Word64 -> Int -> Double
elapsed t0 t1 k = fromIntegral (t1 - t0) / fromIntegral k

body :: Int -> Int -> IO (String, Bool)
body n threads = do
  let want = expectedSum n
  w <- calls nopSafe (n `div` 10 + 1)          -- warm up
  let warm = w == expectedSum (n `div` 10 + 1)
  if threads == 1
    then do
      t0 <- getMonotonicTimeNSec
      p <- calls nopUnsafe n
      t1 <- getMonotonicTimeNSec
      s <- calls nopSafe n
      t2 <- getMonotonicTimeNSec
      let plain = elapsed t0 t1 n
          safe = elapsed t1 t2 n
      return (printf "added_ns=%.2f plain_ns=%.2f safe_ns=%.2f" (safe - plain) plain safe,
              warm && p == want && s == want)
    else do
      t0 <- getMonotonicTimeNSec
      s1 <- calls nopSafe n
      t1 <- getMonotonicTimeNSec
      dones <- forM [0 .. threads - 1] $ \t -> do
        d <- newEmptyMVar
        _ <- forkOn t (calls nopSafe n >>= putMVar d)
        return d
      ss <- mapM takeMVar dones
      t2 <- getMonotonicTimeNSec
      let one = elapsed t0 t1 n
          many = elapsed t1 t2 (threads * n)
      return (printf "scaling=%.3f ns_per_call_1t=%.2f ns_per_call_%dt=%.2f"
                (one / many) one threads many,
              warm && s1 == want && all (== want) ss)

main :: IO ()
main = do
  args <- getArgs
  let n = case args of (a : _) -> read a; [] -> 5000000
      threads = case args of (_ : t : _) -> read t; _ -> 1
  caps <- getNumCapabilities
  r <- newEmptyMVar
  _ <- forkIO (body n threads >>= putMVar r)   -- timed body runs in an unbound thread
  (metrics, ok) <- takeMVar r
  printf "capstan-bench name=safecall impl=ghc caps=%d n=%d %s check=%s\n"
    caps n metrics (if ok then "ok" else "FAIL")
  when (not ok) exitFailure
