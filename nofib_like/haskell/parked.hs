{-# LANGUAGE BangPatterns #-}
-- parked: fork n threads, each blocked on its own empty MVar; once all are
-- blocked, compare RSS with RSS before forking (bytes_per_thread).  Then put
-- into every MVar and time until all n have finished (ns_per_release);
-- rss_kb is the peak RSS (VmHWM).  Check: all n released.
-- Haskell twin of nofib_like/parked.cpp.
module Main (main) where

import Control.Concurrent
import Control.Monad (forM_, when)
import Data.Array.IO (IOArray, newArray_, readArray, writeArray)
import Data.IORef
import GHC.Clock (getMonotonicTimeNSec)
import GHC.Conc (ThreadStatus (..), threadStatus)
import System.Environment (getArgs)
import System.Exit
import Text.Printf (printf)

-- | A field of /proc/self/status in KiB, e.g. "VmRSS".
procStatusKb :: String -> IO Int
procStatusKb key = do
  s <- readFile "/proc/self/status"
  case [ read (head (words (drop 1 rest))) | l <- lines s
                                  , let (k, rest) = break (== ':') l
                                  , k == key ] of
    (v : _) -> length s `seq` return v
    []      -> return 0

-- | Wait (yielding) until the thread is blocked.
awaitBlocked :: ThreadId -> IO ()
awaitBlocked t = do
  st <- threadStatus t
  case st of
    ThreadBlocked _ -> return ()
    ThreadFinished  -> return ()   -- cannot happen before release
    _               -> yield >> awaitBlocked t

body :: Int -> IO (Int, Double, Bool)
body n = do
  -- The MVars and the thread-id table exist before the "before" sample, so
  -- bytes_per_thread is the cost of the blocked threads themselves.
  mvs  <- newArray_ (0, n - 1) :: IO (IOArray Int (MVar ()))
  forM_ [0 .. n - 1] $ \i -> newEmptyMVar >>= writeArray mvs i
  tids <- newArray_ (0, n - 1) :: IO (IOArray Int ThreadId)
  arrived  <- newIORef (0 :: Int)
  left     <- newIORef n
  allThere <- newEmptyMVar
  done     <- newEmptyMVar
  rssBefore <- procStatusKb "VmRSS"
  let worker mv = do
        a <- atomicModifyIORef' arrived (\x -> (x + 1, x + 1))
        when (a == n) (putMVar allThere ())
        () <- takeMVar mv
        r <- atomicModifyIORef' left (\x -> (x - 1, x - 1))
        when (r == 0) (putMVar done ())
      spawn !i = when (i < n) $ do
        t <- readArray mvs i >>= forkIO . worker
        writeArray tids i t
        spawn (i + 1)
  spawn 0
  when (n > 0) (takeMVar allThere)
  forM_ [0 .. n - 1] $ \i -> readArray tids i >>= awaitBlocked
  rssAfter <- procStatusKb "VmRSS"
  t0 <- getMonotonicTimeNSec
  forM_ [0 .. n - 1] $ \i -> readArray mvs i >>= flip putMVar ()
  when (n > 0) (takeMVar done)
  t1 <- getMonotonicTimeNSec
  remaining <- readIORef left
  let m = max 1 n
  return ( (rssAfter - rssBefore) * 1024 `div` m
         , fromIntegral (t1 - t0) / fromIntegral m
         , remaining == 0 )

main :: IO ()
main = do
  args <- getArgs
  let n = case args of (a : _) -> read a; [] -> 1000000
  caps <- getNumCapabilities
  r <- newEmptyMVar
  _ <- forkIO (body n >>= putMVar r)   -- timed body runs in an unbound thread
  (bytes, ns, ok) <- takeMVar r
  hwm <- procStatusKb "VmHWM"
  printf "capstan-bench name=parked impl=ghc caps=%d n=%d bytes_per_thread=%d ns_per_release=%.2f rss_kb=%d check=%s\n"
    caps n bytes ns hwm (if ok then "ok" else "FAIL")
  when (not ok) exitFailure
