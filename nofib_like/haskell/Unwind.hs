-- Unwind: what the killing twins share (the Haskell side of
-- nofib_like/unwind.hpp): frames with a `finally` handler in each, the bare
-- throw+catch floor through them, and "kill n blocked threads and wait
-- until every handler has run", and the whole program of the two exit
-- twins (exitBench).  Not a benchmark: imported by killblocked.hs,
-- shutdown.hs and threads007.hs.
module Unwind (descend, floorNs, killBlocked, exitBench) where

import Control.Concurrent
import Control.Exception
import Control.Monad
import Data.IORef
import GHC.Clock (getMonotonicTimeNSec)
import GHC.Conc (ThreadStatus (..), threadStatus)
import System.Environment (getArgs)
import System.Exit
import Text.Printf (printf)

-- | descend c k bottom runs bottom k frames deep; each frame bumps c as it
-- unwinds.
descend :: IORef Int -> Int -> IO () -> IO ()
descend c k bottom
  | k <= 1 = bottom `finally` bump c
  | otherwise = descend c (k - 1) bottom `finally` bump c

bump :: IORef Int -> IO ()
bump c = atomicModifyIORef' c (\x -> (x + 1, ()))

waitFor :: IORef Int -> Int -> IO ()
waitFor r want = do
  v <- readIORef r
  when (v < want) (yield >> waitFor r want)

waitBlocked :: ThreadId -> IO ()
waitBlocked t = do
  s <- threadStatus t
  case s of
    ThreadBlocked _ -> return ()
    _ -> yield >> waitBlocked t

-- | floorNs frames reps: ns per throwIO ThreadKilled caught through frames.
floorNs :: Int -> Int -> IO Double
floorNs frames reps = do
  c <- newIORef 0
  t0 <- getMonotonicTimeNSec
  forM_ [1 .. reps] $ \_ ->
    descend c frames (throwIO ThreadKilled) `catch` \e -> case e of
      ThreadKilled -> return ()
      _ -> throwIO e
  t1 <- getMonotonicTimeNSec
  return (fromIntegral (t1 - t0) / fromIntegral reps)

-- | killBlocked n frames bottom forks n threads that block in (bottom i)
-- frames deep, waits until all are blocked, kills them all and waits for
-- every handler.  Returns ns per thread and whether every handler ran.
killBlocked :: Int -> Int -> (Int -> IO ()) -> IO (Double, Bool)
killBlocked n frames bottom = do
  c <- newIORef 0
  tids <- forM [0 .. n - 1] $ \i -> forkIO (descend c frames (bottom i))
  mapM_ waitBlocked tids
  t0 <- getMonotonicTimeNSec
  mapM_ killThread tids
  waitFor c (n * frames)
  t1 <- getMonotonicTimeNSec
  v <- readIORef c
  return (fromIntegral (t1 - t0) / fromIntegral n, v == n * frames)

-- | exitBench name defaultN third: the program of shutdown.hs and
-- threads007.hs.  n threads (argument 1, default defaultN) block at exit,
-- `frames` deep (argument 2, default 1): a third on MVars, a third in
-- threadDelay (1 h), a third on what `third` makes (it returns the
-- blocking action for thread i).  Prints exit_ns (the kill-and-wait time
-- per thread), floor_ns (throwIO ThreadKilled caught through the same
-- frames) and their ratio.
exitBench :: String -> Int -> IO (Int -> IO ()) -> IO ()
exitBench name defaultN third = do
  args <- getArgs
  let n = case args of (a : _) -> read a; [] -> defaultN
      frames = case args of (_ : f : _) -> read f; _ -> 1
  caps <- getNumCapabilities
  r <- newEmptyMVar
  _ <- forkIO (body n frames >>= putMVar r)
  (ns, fl, ok) <- takeMVar r
  printf "capstan-bench name=%s impl=ghc caps=%d n=%d exit_ns=%.2f floor_ns=%.2f ratio=%.2f frames=%d check=%s\n"
    name caps n ns fl (ns / fl) frames (if ok then "ok" else "FAIL")
  when (not ok) exitFailure
  where
    body n frames = do
      fl <- floorNs frames 100000
      block3 <- third
      let bottom i = case i `mod` 3 of
            0 -> newEmptyMVar >>= takeMVar :: IO ()
            1 -> threadDelay 3600000000
            _ -> block3 i
      (ns, ok) <- killBlocked n frames bottom
      return (ns, fl, ok)
