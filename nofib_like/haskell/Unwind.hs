-- Unwind: what the killing twins share (the Haskell side of
-- nofib_like/unwind.hpp): frames with a `finally` handler in each, the bare
-- throw+catch floor through them, and "kill n blocked threads and wait
-- until every handler has run".  Not a benchmark: imported by
-- killblocked.hs, shutdown.hs and threads007.hs.
module Unwind (descend, floorNs, killBlocked) where

import Control.Concurrent
import Control.Exception
import Control.Monad
import Data.IORef
import GHC.Clock (getMonotonicTimeNSec)
import GHC.Conc (ThreadStatus (..), threadStatus)

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
